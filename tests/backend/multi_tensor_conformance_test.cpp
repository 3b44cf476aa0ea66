// SPDX-License-Identifier: Apache-2.0
// The multi-tensor optimizer updates on every backend of this process (cpu:0, sim:0, opencl:0 on PoCL, and
// cuda:0 on a machine with a GPU): bitwise the single updates, and typed errors for bad lists.
#include <gtest/gtest.h>

#include <string>

#include "backend/support/backend_params.hpp"
#include "backend/support/multi_tensor_checks.hpp"
#include "tensorpool/device/device_manager.hpp"

namespace tp::backend::testing {
namespace {

class MultiTensorUpdate : public ::testing::TestWithParam<std::string> {
 protected:
  device::Device& device() const { return device::DeviceManager::instance().device(GetParam()); }
};

TEST_P(MultiTensorUpdate, EqualsTheSingleUpdatesBitwise) {
  check_multi_tensor_updates(device(), multi_tensor_shapes());
}

TEST_P(MultiTensorUpdate, RefusesMismatchedLists) { check_multi_tensor_errors(device(), other_device(device())); }

INSTANTIATE_TEST_SUITE_P(Backends, MultiTensorUpdate, ::testing::ValuesIn(backend_devices()), backend_test_name);

}  // namespace
}  // namespace tp::backend::testing

// SPDX-License-Identifier: Apache-2.0
// HostTensor <-> Tensor copies on every backend present: the CPU device, and the accelerators whose memory
// the host cannot touch directly (sim, opencl), for every dtype, a scalar and empty tensors.

#include "tensorpool/train/host_tensor.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "device/support/device_test_support.hpp"
#include "support/checkpoint_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::train {
namespace {

using device::testing::Backend;
using device::testing::make_device;

class HostTensorTest : public ::testing::TestWithParam<Backend> {};

TEST_P(HostTensorTest, RoundTripThroughTheDeviceKeepsEveryByte) {
  const std::unique_ptr<device::Device> device = make_device(GetParam());
  const CheckpointState sample = testing::sample_state(42);
  for (const auto& [name, host] : sample.tensors) {
    const Tensor tensor = to_device(host, *device, {.name = name});
    EXPECT_EQ(tensor.dtype(), host.dtype) << name;
    EXPECT_EQ(tensor.shape().dims_vector(), host.dims) << name;
    EXPECT_EQ(tensor.name(), name);
    EXPECT_EQ(to_host(tensor), host) << name;
  }
  device->synchronize();
}

TEST_P(HostTensorTest, ToHostOfAViewCopiesOnlyTheView) {
  const std::unique_ptr<device::Device> device = make_device(GetParam());
  const std::vector<float> values{0, 1, 2, 3, 4, 5, 6, 7};
  const Tensor matrix = Tensor::from_vector<float>(values, Shape{4, 2}, *device);
  const HostTensor rows = to_host(matrix.slice(1, 3));
  EXPECT_EQ(rows.dims, (std::vector<std::int64_t>{2, 2}));
  std::vector<float> copied(4);
  std::memcpy(copied.data(), rows.bytes.data(), rows.bytes.size());
  EXPECT_EQ(copied, (std::vector<float>{2, 3, 4, 5}));
}

TEST_P(HostTensorTest, MismatchedBytesAreRejected) {
  const std::unique_ptr<device::Device> device = make_device(GetParam());
  HostTensor host = testing::random_tensor(DType::f16, {3, 3}, 1);
  host.bytes.pop_back();
  try {
    (void)to_device(host, *device);
    ADD_FAILURE() << "expected tp::InvalidArgument";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("needs 18 bytes but holds 17"), std::string::npos) << error.what();
  }
  host.dims = {-3, -6};
  EXPECT_THROW(to_device(host, *device), InvalidArgument);
  EXPECT_THROW(to_host(Tensor()), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, HostTensorTest, ::testing::ValuesIn(device::testing::present_backends()),
                         device::testing::backend_param_name);

}  // namespace
}  // namespace tp::train

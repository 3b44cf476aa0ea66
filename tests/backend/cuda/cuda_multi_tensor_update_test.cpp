// SPDX-License-Identifier: Apache-2.0
// The CUDA multi-tensor optimizer kernels (launch_adam_multi, launch_sgd_multi: one launch over a table of
// pointers and sizes): bitwise the single-update kernels, with more entries than one table holds (the adapter
// launches once per kMultiTensorEntries), and typed errors for bad lists. Skipped without a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/cuda_test_support.hpp"
#include "backend/support/multi_tensor_checks.hpp"

namespace tp::backend::cuda {
namespace {

using testing::cuda_options;
using testing::make_manager;

TEST(CudaMultiTensorUpdate, EqualsTheSingleUpdatesBitwise) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  std::vector<Shape> shapes = backend::testing::multi_tensor_shapes();
  for (std::int64_t extra = 0; shapes.size() < 37; ++extra) shapes.push_back(Shape{extra * 97 + 1});
  backend::testing::check_multi_tensor_updates(manager->device("cuda:0"), shapes);
}

TEST(CudaMultiTensorUpdate, RefusesMismatchedLists) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  backend::testing::check_multi_tensor_errors(manager->device("cuda:0"), nullptr);
}

}  // namespace
}  // namespace tp::backend::cuda

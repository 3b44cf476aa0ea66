// SPDX-License-Identifier: Apache-2.0
// A cuda device with a small memory limit (a logical device of cuda:0) runs out as tp::OutOfMemoryError naming
// it, not as a DeviceError, and its memory is usable again once buffers go back. Skipped, saying why, without a
// GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::backend::cuda {
namespace {

using testing::cuda_options;
using testing::make_manager;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kLimit = 64 * kMiB;

TEST(CudaOutOfMemory, ALimitedDeviceRunsOutAsOutOfMemoryError) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options({kLimit}));
  device::Device& gpu = manager->device("cuda:0");
  ASSERT_EQ(gpu.capacity_bytes(), kLimit);
  try {
    (void)gpu.allocate(kLimit + kMiB);
    FAIL() << "an allocation above the limit succeeded";
  } catch (const OutOfMemoryError& error) {
    EXPECT_NE(std::string(error.what()).find("cuda:0"), std::string::npos) << error.what();
  }
  std::vector<std::shared_ptr<Buffer>> held;
  bool ran_out = false;
  for (int piece = 0; piece < 16 && !ran_out; ++piece) {
    try {
      held.push_back(gpu.allocate(8 * kMiB));
    } catch (const OutOfMemoryError&) {
      ran_out = true;
    }
  }
  EXPECT_TRUE(ran_out) << "16 pieces of 8 MiB fit in a 64 MiB device";
  EXPECT_LE(held.size() * 8 * kMiB, kLimit);
  EXPECT_GE(held.size(), 4U) << "at least half the limit is usable";
  held.clear();
  EXPECT_NO_THROW((void)gpu.allocate(32 * kMiB)) << "the memory came back";
}

}  // namespace
}  // namespace tp::backend::cuda

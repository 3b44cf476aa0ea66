// SPDX-License-Identifier: Apache-2.0
// A task error on a cuda stream is kept: the work behind it is skipped, synchronize() rethrows it once, and the
// stream is usable again afterwards. Skipped, saying why, without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::cuda {
namespace {

using testing::cuda_options;
using testing::make_manager;
using testing::pattern;

constexpr std::size_t kBytes = std::size_t{1} << 16;

TEST(CudaErrors, AnErrorIsKeptSkipsTheWorkBehindItAndIsRethrownOnce) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  device::Device& gpu = manager->device("cuda:0");
  device::Stream& stream = gpu.stream();
  const std::vector<std::uint8_t> first = pattern(kBytes, 1);
  const std::vector<std::uint8_t> second = pattern(kBytes, 2);
  const std::shared_ptr<Buffer> buffer = gpu.allocate(kBytes);
  gpu.copy_from_host(stream, first.data(), buffer, 0, kBytes);
  stream.enqueue([] { throw std::runtime_error("task failed on purpose"); });
  gpu.copy_from_host(stream, second.data(), buffer, 0, kBytes);  // skipped behind the error
  const device::Event after = stream.record();
  after.synchronize();  // records still complete behind an error, so waiters do not hang
  EXPECT_TRUE(stream.failed());
  EXPECT_THROW(stream.synchronize(), std::runtime_error);
  EXPECT_FALSE(stream.failed());
  EXPECT_NO_THROW(stream.synchronize()) << "reported once";
  std::vector<std::uint8_t> host(kBytes);
  gpu.copy_to_host(stream, buffer, 0, host.data(), kBytes);
  EXPECT_EQ(host, first) << "the copy behind the error ran";
  gpu.copy_from_host(stream, second.data(), buffer, 0, kBytes);
  gpu.copy_to_host(stream, buffer, 0, host.data(), kBytes);
  EXPECT_EQ(host, second) << "the stream works again after the error was reported";
}

TEST(CudaErrors, TheDeviceSynchronizeReportsAKeptError) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options({}, /*streams=*/2));
  device::Device& gpu = manager->device("cuda:0");
  gpu.stream(1).enqueue([] { throw std::logic_error("second stream"); });
  EXPECT_THROW(gpu.synchronize(), std::logic_error);
  EXPECT_NO_THROW(gpu.synchronize());
}

}  // namespace
}  // namespace tp::backend::cuda

// SPDX-License-Identifier: Apache-2.0
// A cuda device's stream runs its work in enqueue order: many copies into one buffer leave the last one's
// bytes, a host task runs only after the copies before it completed (it reads what they wrote), and a buffer
// dropped while its copies are pending is reused only after they ran. Skipped, saying why, without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::cuda {
namespace {

using testing::cuda_options;
using testing::make_manager;
using testing::pattern;

constexpr std::size_t kBytes = std::size_t{1} << 20;

TEST(CudaStreamOrder, CopiesRunInEnqueueOrder) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  device::Device& gpu = manager->device("cuda:0");
  device::Stream& stream = gpu.stream();
  const std::shared_ptr<Buffer> target = gpu.allocate(kBytes);
  const std::shared_ptr<Buffer> relay = gpu.allocate(kBytes);
  constexpr int kRounds = 200;  // more than the stream keeps in flight
  for (int round = 0; round < kRounds; ++round) {
    const std::vector<std::uint8_t> bytes = pattern(kBytes, static_cast<std::uint32_t>(round));
    gpu.copy_from_host(stream, bytes.data(), relay, 0, kBytes);  // staged: `bytes` may go at once
    device::copy(stream, relay, 0, stream, target, 0, kBytes);
  }
  std::vector<std::uint8_t> host(kBytes);
  gpu.copy_to_host(stream, target, 0, host.data(), kBytes);
  EXPECT_EQ(host, pattern(kBytes, kRounds - 1));
}

TEST(CudaStreamOrder, AHostTaskRunsAfterTheCommandsBeforeIt) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  device::Device& gpu = manager->device("cuda:0");
  device::Stream& stream = gpu.stream();
  const std::vector<std::uint8_t> bytes = pattern(kBytes, 7);
  const std::shared_ptr<Buffer> buffer = gpu.allocate(kBytes);
  gpu.copy_from_host(stream, bytes.data(), buffer, 0, kBytes);
  const device::HostReadback readback = gpu.read_to_host_async(stream, buffer, 0, kBytes);
  bool matched = false;
  const device::Stream* running = nullptr;
  stream.enqueue([&] {
    running = device::Stream::current();
    matched = std::memcmp(readback.bytes.get(), bytes.data(), kBytes) == 0;
  });
  stream.synchronize();
  EXPECT_TRUE(matched) << "the host task ran before the device-to-host copy had completed";
  EXPECT_EQ(running, &stream);
  EXPECT_TRUE(stream.idle());
}

TEST(CudaStreamOrder, ABufferDroppedWhileItsCopyIsPendingIsReusedOnlyAfterIt) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  device::Device& gpu = manager->device("cuda:0");
  device::Stream& stream = gpu.stream();
  const std::vector<std::uint8_t> first = pattern(kBytes, 8);
  const std::vector<std::uint8_t> second = pattern(kBytes, 9);
  const std::shared_ptr<Buffer> kept = gpu.allocate(kBytes);
  std::shared_ptr<Buffer> dropped = gpu.allocate(kBytes);
  gpu.copy_from_host(stream, first.data(), dropped, 0, kBytes);
  device::copy(stream, dropped, 0, stream, kept, 0, kBytes);  // reads `dropped` on the device
  dropped.reset();                                            // the task still holds it
  const std::shared_ptr<Buffer> reused = gpu.allocate(kBytes);
  gpu.copy_from_host(stream, second.data(), reused, 0, kBytes);
  std::vector<std::uint8_t> host(kBytes);
  gpu.copy_to_host(stream, kept, 0, host.data(), kBytes);
  EXPECT_EQ(host, first);
  gpu.copy_to_host(stream, reused, 0, host.data(), kBytes);
  EXPECT_EQ(host, second);
  EXPECT_EQ(gpu.live_buffers(), 2U);
}

}  // namespace
}  // namespace tp::backend::cuda

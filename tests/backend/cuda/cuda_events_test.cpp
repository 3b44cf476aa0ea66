// SPDX-License-Identifier: Apache-2.0
// Events of cuda streams order other streams: a stream that waits on an event of another cuda stream (of the
// same device, or of another logical device) sees the work before the record, and a cuda stream waits on an
// event of a device of another kind too (the host wait). Skipped, saying why, without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::cuda {
namespace {

using testing::cuda_options;
using testing::make_manager;
using testing::pattern;

constexpr std::size_t kBytes = std::size_t{32} << 20;  // long enough that an unordered read would see old bytes

TEST(CudaEvents, AStreamWaitsForAnEventOfAnotherStream) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options({}, /*streams=*/2));
  device::Device& gpu = manager->device("cuda:0");
  device::Stream& producer = gpu.stream(0);
  device::Stream& consumer = gpu.stream(1);
  const std::shared_ptr<Buffer> source = gpu.allocate(kBytes);
  const std::shared_ptr<Buffer> copy = gpu.allocate(kBytes);
  for (std::uint32_t round = 0; round < 4; ++round) {
    const std::vector<std::uint8_t> bytes = pattern(kBytes, round);
    gpu.copy_from_host(producer, bytes.data(), source, 0, kBytes);
    const device::Event written = producer.record();
    consumer.wait(written);
    // The copy on `consumer` after the wait, from `source` on the same device.
    device::copy(consumer, source, 0, consumer, copy, 0, kBytes);
    std::vector<std::uint8_t> host(kBytes);
    gpu.copy_to_host(consumer, copy, 0, host.data(), kBytes);
    EXPECT_EQ(host, bytes) << "round " << round;
    EXPECT_TRUE(written.query()) << "complete once the consumer, which waited for it, is done";
    producer.synchronize();
  }
}

TEST(CudaEvents, EventsOrderTheStreamsOfTwoLogicalDevicesBothWays) {
  TP_REQUIRE_CUDA();
  constexpr std::size_t kLimit = std::size_t{128} << 20;
  const auto manager = make_manager(cuda_options({kLimit, kLimit}));
  device::Device& first = manager->device("cuda:0");
  device::Device& second = manager->device("cuda:1");
  const std::vector<std::uint8_t> before = pattern(kBytes, 11);
  const std::vector<std::uint8_t> after = pattern(kBytes, 12);
  const std::shared_ptr<Buffer> source = first.allocate(kBytes);
  const std::shared_ptr<Buffer> target = second.allocate(kBytes);
  first.copy_from_host(first.stream(), before.data(), source, 0, kBytes);
  // A peer copy on the second device's stream: it waits for the first stream's record (the bytes are there),
  // and the first stream waits for the second's record behind the copy (the bytes were read) ...
  device::copy(first.stream(), source, 0, second.stream(), target, 0, kBytes);
  // ... so this overwrite, enqueued at once, runs only after the read.
  first.copy_from_host(first.stream(), after.data(), source, 0, kBytes);
  std::vector<std::uint8_t> host(kBytes);
  second.copy_to_host(second.stream(), target, 0, host.data(), kBytes);
  EXPECT_EQ(host, before);
  first.copy_to_host(first.stream(), source, 0, host.data(), kBytes);
  EXPECT_EQ(host, after);
}

TEST(CudaEvents, ACudaStreamWaitsForAnEventOfADeviceOfAnotherKind) {
  TP_REQUIRE_CUDA();
  auto options = cuda_options();
  options.sim_devices = 1;
  const auto manager = make_manager(options);
  device::Device& gpu = manager->device("cuda:0");
  device::Device& sim = manager->device("sim:0");
  std::atomic<bool> released{false};
  sim.stream().enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    released.store(true);
  });
  gpu.stream().wait(sim.stream().record());
  bool ran_after = false;
  gpu.stream().enqueue([&] { ran_after = released.load(); });
  gpu.stream().synchronize();
  EXPECT_TRUE(ran_after) << "the cuda stream ran past the wait before the sim stream's event completed";
  sim.synchronize();
}

TEST(CudaEvents, ARecordedEventCompletesAndStaysUsableAfterItsStreamMovedOn) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options({}, /*streams=*/2));
  device::Device& gpu = manager->device("cuda:0");
  const device::Event early = gpu.stream(0).record();
  gpu.stream(0).synchronize();
  EXPECT_TRUE(early.query());
  // Waiting on an event long complete (its stream retired it) neither blocks nor fails.
  gpu.stream(1).wait(early);
  gpu.stream(1).synchronize();
  EXPECT_TRUE(gpu.stream(1).idle());
}

}  // namespace
}  // namespace tp::backend::cuda

// SPDX-License-Identifier: Apache-2.0
// Stream-ordered reuse: a buffer dropped by the host while work that uses it is pending goes back to the
// allocator only once that work has run, on every backend; an allocation that finds the device full waits
// for such pending frees before it reports out of memory.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::device {
namespace {

using testing::Backend;
using testing::Gate;
using testing::make_device;

class StreamOrderedReuse : public ::testing::TestWithParam<Backend> {};

TEST_P(StreamOrderedReuse, ABufferDroppedWhileItsWorkIsPendingReturnsOnlyAfterTheWork) {
  auto device = make_device(GetParam());
  constexpr std::size_t kBytes = kMiB;
  Gate gate;
  std::atomic<bool> task_saw_it_live{false};
  const std::vector<unsigned char> ones(kBytes, 1);
  std::thread host;  // the cpu stream runs a task in the enqueuing thread, so enqueue from a helper thread
  {
    std::shared_ptr<Buffer> buffer = device->allocate(kBytes, {.name = "pending"});
    auto task = [&gate, &task_saw_it_live, &device] {
      gate.wait();
      task_saw_it_live = device->memory().stats().bytes_requested >= kBytes;
    };
    // The work that uses the buffer, behind the gate: a copy into it (device memory of every backend).
    host = std::thread([&device, &ones, task, buffer] {
      device->stream().enqueue(task);
      device->copy_from_host(device->stream(), ones.data(), buffer, 0, kBytes);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }  // the host drops its last handle here, while the task is pending (the helper thread's copy holds it)
  EXPECT_EQ(device->memory().stats().bytes_requested, kBytes) << "freed under pending work";
  EXPECT_EQ(device->live_buffers(), 1u);
  gate.open();
  host.join();
  device->synchronize();
  EXPECT_TRUE(task_saw_it_live.load());
  EXPECT_EQ(device->memory().stats().bytes_requested, 0u);
  EXPECT_EQ(device->live_buffers(), 0u);
}

TEST_P(StreamOrderedReuse, NoNewAllocationOverlapsMemoryThatPendingWorkStillUses) {
  auto device = make_device(GetParam(), 64 * kMiB, DeviceOptions{.num_streams = 2});
  Gate gate;
  std::thread host;
  void* first_address = nullptr;
  {
    std::shared_ptr<Buffer> first = device->allocate(kMiB);
    host = std::thread([&] {
      device->stream().enqueue([&first_address, &gate, first] {
        first_address = first->data();
        gate.wait();
      });
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::shared_ptr<Buffer> second = device->allocate(kMiB);
  // Stream 0 is blocked behind the gate; stream 1 may read the address (the cpu host may read it directly).
  const auto second_start = reinterpret_cast<std::uintptr_t>(
      device->host_accessible() ? second->data() : testing::run_on(device->stream(1), [&] { return second->data(); }));
  gate.open();
  host.join();
  device->synchronize();
  const auto first_start = reinterpret_cast<std::uintptr_t>(first_address);
  EXPECT_TRUE(second_start + kMiB <= first_start || first_start + kMiB <= second_start)
      << "a new buffer overlaps one whose work was still pending";
}

INSTANTIATE_TEST_SUITE_P(Backends, StreamOrderedReuse, ::testing::ValuesIn(testing::present_backends()),
                         testing::backend_param_name);

class QueuedStreamOrderedReuse : public ::testing::TestWithParam<Backend> {};

TEST_P(QueuedStreamOrderedReuse, AFullDeviceWaitsForPendingFreesBeforeReportingOutOfMemory) {
  // 3 MiB + 3 MiB do not fit in 4 MiB: the second allocation must wait for the first buffer's work.
  auto device = make_device(GetParam(), 4 * kMiB);
  Gate gate;
  {
    std::shared_ptr<Buffer> first = device->allocate(3 * kMiB);
    device->stream().enqueue([&gate, first] { gate.wait(); });
  }
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.open();
  });
  std::shared_ptr<Buffer> second = device->allocate(3 * kMiB);
  opener.join();
  EXPECT_EQ(device->memory().stats().bytes_requested, 3 * kMiB);
  EXPECT_THROW(device->allocate(3 * kMiB), OutOfMemoryError);  // nothing pending: a real shortage
}

// Queued streams only: the cpu's inline stream would run the gated task in this thread.
INSTANTIATE_TEST_SUITE_P(Backends, QueuedStreamOrderedReuse, ::testing::ValuesIn(testing::queued_backends()),
                         testing::backend_param_name);

TEST(StreamOrderedReuse, ReleasedMemoryIsPoisonedInDebugMode) {
  auto device = make_device(Backend::sim, 64 * kMiB, DeviceOptions{.poison_freed = true});
  std::vector<float> ones(1024, 1.0F);
  void* stale = nullptr;
  {
    std::shared_ptr<Buffer> buffer = device->allocate(ones.size() * sizeof(float));
    device->copy_from_host(device->stream(), ones.data(), buffer, 0, buffer->bytes());
    stale = testing::run_on(device->stream(), [buffer] { return buffer->data(); });
  }
  device->synchronize();
  // A kernel that kept a raw pointer past the release (a use-after-free) reads NaN, not plausible data.
  const float seen = testing::run_on(device->stream(), [stale] {
    float value = 0;
    std::memcpy(&value, stale, sizeof value);
    return value;
  });
  EXPECT_TRUE(std::isnan(seen));
}

}  // namespace
}  // namespace tp::device

// SPDX-License-Identifier: Apache-2.0
// Streams and events: order within a stream, order across streams through events, asynchronous errors.
#include "tensorpool/device/stream.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::device {
namespace {

using testing::Backend;
using testing::Gate;
using testing::make_device;

// Cases every backend passes; Queued*: cases that hold a worker-run stream behind a gate or keep a task's
// error for synchronize (every backend but the cpu, whose inline stream runs a task as it is enqueued).
class EveryBackendStream : public ::testing::TestWithParam<Backend> {};
class QueuedStream : public ::testing::TestWithParam<Backend> {};
class QueuedEvent : public ::testing::TestWithParam<Backend> {};

TEST_P(EveryBackendStream, RunsTasksInEnqueueOrder) {
  auto device = make_device(GetParam());
  std::vector<int> seen;
  for (int task = 0; task < 1000; ++task) device->stream().enqueue([&seen, task] { seen.push_back(task); });
  device->stream().synchronize();
  ASSERT_EQ(seen.size(), 1000u);
  for (int task = 0; task < 1000; ++task) ASSERT_EQ(seen[static_cast<std::size_t>(task)], task);
}

TEST_P(QueuedStream, NamesItsDeviceAndIndex) {
  auto device = make_device(GetParam(), 64 * kMiB, DeviceOptions{.num_streams = 2});
  EXPECT_EQ(device->stream(1).name(), std::string(testing::backend_label(GetParam())) + ":0/stream:1");
  EXPECT_EQ(&device->stream(1).device(), device.get());
  EXPECT_THROW(device->stream(2), InvalidArgument);
}

TEST_P(QueuedStream, CurrentIsSetOnlyInsideTasks) {
  auto device = make_device(GetParam());
  EXPECT_EQ(Stream::current(), nullptr);
  Stream* inside = testing::run_on(device->stream(), [] { return Stream::current(); });
  EXPECT_EQ(inside, &device->stream());
}

TEST_P(QueuedEvent, CompletesOnlyAfterTheWorkBeforeIt) {
  auto device = make_device(GetParam());
  Gate gate;
  device->stream().enqueue([&gate] { gate.wait(); });
  Event event = device->stream().record();
  EXPECT_FALSE(event.query());
  EXPECT_FALSE(device->stream().idle());
  gate.open();
  event.synchronize();
  EXPECT_TRUE(event.query());
  EXPECT_TRUE(Event().query());  // never recorded: complete
}

// The waiter is asleep before the event completes (no polling), and is woken by the completion.
TEST_P(QueuedEvent, SleepUntilCompleteReturnsOnlyOnceTheWorkBeforeItHasRun) {
  auto device = make_device(GetParam());
  std::atomic<bool> ran{false};
  device->stream().enqueue([&ran] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ran = true;
  });
  const Event event = device->stream().record();
  event.sleep_until_complete();
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(event.query());
  event.sleep_until_complete();  // complete: returns at once
  Event().sleep_until_complete();
}

TEST_P(QueuedEvent, OrdersWorkAcrossStreams) {
  auto device = make_device(GetParam(), 64 * kMiB, DeviceOptions{.num_streams = 2});
  Gate gate;
  std::atomic<int> produced{0};
  int consumed = -1;
  device->stream(0).enqueue([&] {
    gate.wait();
    produced = 42;
  });
  device->stream(1).wait(device->stream(0).record());
  device->stream(1).enqueue([&] { consumed = produced.load(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(device->stream(1).idle());  // held behind stream 0's event
  gate.open();
  device->stream(1).synchronize();
  EXPECT_EQ(consumed, 42);
}

TEST_P(QueuedStream, KeepsAnAsynchronousErrorForSynchronizeAndSkipsTheWorkBehindIt) {
  auto device = make_device(GetParam());
  bool ran_after_error = false;
  device->stream().enqueue([] { throw std::runtime_error("kernel failed"); });
  device->stream().enqueue([&] { ran_after_error = true; });
  Event event = device->stream().record();
  event.synchronize();  // events still complete behind an error
  try {
    device->stream().synchronize();
    FAIL() << "synchronize() did not rethrow the task's error";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "kernel failed");
  }
  EXPECT_FALSE(ran_after_error);
  // Reported once; the stream works again.
  bool ran_later = false;
  device->stream().enqueue([&] { ran_later = true; });
  device->stream().synchronize();
  EXPECT_TRUE(ran_later);
}

TEST_P(QueuedStream, FailedTellsAKeptErrorUntilSynchronizeReportsIt) {
  auto device = make_device(GetParam());
  EXPECT_FALSE(device->stream().failed());
  device->stream().enqueue([] { throw std::runtime_error("kernel failed"); });
  device->stream().record().synchronize();
  EXPECT_TRUE(device->stream().failed());
  EXPECT_THROW(device->stream().synchronize(), std::runtime_error);
  EXPECT_FALSE(device->stream().failed());
}

// The asynchronous read into host memory returns before the copy has run (the stream is held by a gate) and
// holds the bytes once its event completes; behind a kept error the event still completes.
TEST_P(QueuedStream, ReadToHostAsyncReturnsAtOnceAndHoldsTheBytesOnceItsEventCompletes) {
  auto device = make_device(GetParam());
  const std::vector<char> bytes{1, 2, 3, 4, 5, 6, 7, 8};
  const auto buffer = device->allocate(bytes.size());
  device->copy_from_host(device->stream(), bytes.data(), buffer, 0, bytes.size());
  Gate gate;
  device->stream().enqueue([&gate] { gate.wait(); });
  const HostReadback readback = device->read_to_host_async(device->stream(), buffer, 2, 4);
  EXPECT_FALSE(readback.ready.query()) << "the read waited for the stream";
  gate.open();
  readback.ready.synchronize();
  ASSERT_NE(readback.bytes, nullptr);
  EXPECT_EQ(std::vector<char>(static_cast<const char*>(readback.bytes.get()),
                              static_cast<const char*>(readback.bytes.get()) + 4),
            (std::vector<char>{3, 4, 5, 6}));
  EXPECT_THROW(device->read_to_host_async(device->stream(), buffer, 6, 4), InvalidArgument) << "out of range";

  device->stream().enqueue([] { throw std::runtime_error("kernel failed"); });
  device->read_to_host_async(device->stream(), buffer, 0, 8).ready.synchronize();
  EXPECT_TRUE(device->stream().failed());
  EXPECT_THROW(device->stream().synchronize(), std::runtime_error);
}

TEST(Stream, InlineStreamRaisesFromEnqueue) {
  auto device = make_device(Backend::cpu);
  EXPECT_THROW(device->stream().enqueue([] { throw std::runtime_error("kernel failed"); }), std::runtime_error);
  device->stream().synchronize();  // nothing kept
}

TEST_P(QueuedStream, SynchronizeOfTheDeviceWaitsForEveryStream) {
  auto device = make_device(GetParam(), 64 * kMiB, DeviceOptions{.num_streams = 3});
  std::atomic<int> done{0};
  for (std::size_t stream = 0; stream < 3; ++stream) {
    for (int task = 0; task < 50; ++task) device->stream(stream).enqueue([&done] { ++done; });
  }
  device->synchronize();
  EXPECT_EQ(done.load(), 150);
}

// The worker wakes waiters only once the smallest count one of them waits for is reached (not after every
// task); a waiter whose work is done must not be held back by work enqueued after it began to wait.
TEST_P(QueuedStream, SynchronizeReturnsOnceItsOwnWorkIsDoneWhileLaterWorkStillRuns) {
  auto device = make_device(GetParam());
  Stream& stream = device->stream();
  Gate first_gate;
  Gate second_gate;
  stream.enqueue([&first_gate] { first_gate.wait(); });
  std::atomic<bool> first_returned{false};
  std::thread first_waiter([&] {
    stream.synchronize();
    first_returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the first waiter sleeps, waiting for 1 task
  stream.enqueue([&second_gate] { second_gate.wait(); });
  std::atomic<bool> second_returned{false};
  std::thread second_waiter([&] {
    stream.synchronize();
    second_returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(first_returned.load());
  first_gate.open();
  for (int poll = 0; poll < 500 && !first_returned.load(); ++poll) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(first_returned.load()) << "the first waiter's task ran, yet it still waits behind the second task";
  EXPECT_FALSE(second_returned.load());
  second_gate.open();
  first_waiter.join();
  second_waiter.join();
  EXPECT_TRUE(second_returned.load());
  EXPECT_TRUE(stream.idle());
}

TEST_P(EveryBackendStream, ManyHostThreadsEnqueueConcurrently) {
  auto device = make_device(GetParam());
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int thread = 0; thread < 4; ++thread) {
    threads.emplace_back([&] {
      for (int task = 0; task < 200; ++task) device->stream().enqueue([&done] { ++done; });
    });
  }
  for (auto& thread : threads) thread.join();
  device->synchronize();
  EXPECT_EQ(done.load(), 800);
}

INSTANTIATE_TEST_SUITE_P(Backends, EveryBackendStream, ::testing::ValuesIn(testing::present_backends()),
                         testing::backend_param_name);
INSTANTIATE_TEST_SUITE_P(Backends, QueuedStream, ::testing::ValuesIn(testing::queued_backends()),
                         testing::backend_param_name);
INSTANTIATE_TEST_SUITE_P(Backends, QueuedEvent, ::testing::ValuesIn(testing::queued_backends()),
                         testing::backend_param_name);

}  // namespace
}  // namespace tp::device

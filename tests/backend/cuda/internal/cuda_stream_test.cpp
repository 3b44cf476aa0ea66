// SPDX-License-Identifier: Apache-2.0
// CudaStreamImpl's own rules (src/backend/cuda/cuda_stream_impl.hpp) with a gate on the CUDA stream (a host
// function that holds it until released): a command task's captures live until the stream has passed its work,
// in-flight work is bounded, a wait on another CUDA stream's event orders the device without blocking the
// worker, a failed CUDA call checked in a task is kept as a DeviceError naming the call, skipping the work
// behind it, and an after_completion check runs on the completer once the work completed. Built only with the
// CUDA backend; skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/cuda_error.hpp"
#include "backend/cuda/cuda_stream_impl.hpp"
#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/backends.hpp"

namespace tp::backend::cuda {
namespace {

using testing::cuda_options;
using testing::make_manager;

// True once `condition` holds, polling for up to 10 s (false then).
bool eventually(const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Holds a CUDA stream (a host function on it spins) until open() is called.
class Gate {
 public:
  void close_on(CudaStream& stream) {
    stream.enqueue_commands(
        [this, &stream] { check(cudaLaunchHostFunc(stream.native(), &Gate::hold, &open_), "cudaLaunchHostFunc"); });
  }
  void open() { open_.store(true); }

 private:
  static void hold(void* flag) {
    while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
  }
  std::atomic<bool> open_{false};
};

std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

TEST(CudaStream, AStreamOfAnotherKindIsRefusedNamingIt) {
  memory::MemoryConfig config;
  config.device = "sim:0";
  const auto sim = device::make_sim_device({device::DeviceKind::sim, 0}, {device::DeviceKind::sim, 0},
                                           std::size_t{8} << 20, config, {});
  const std::string message = message_of([&] { (void)cuda_stream(sim->stream()); });
  EXPECT_NE(message.find("sim:0/stream:0 is not a CUDA stream"), std::string::npos) << message;
}

TEST(CudaStream, CapturesLiveUntilTheStreamPassedTheirWork) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  auto& gpu = dynamic_cast<CudaDevice&>(manager->device("cuda:0"));
  CudaStream& stream = cuda_stream(gpu.stream());
  Gate gate;
  gate.close_on(stream);
  auto held = std::make_shared<int>(1);
  const std::weak_ptr<int> watch = held;
  stream.enqueue_commands([held = std::move(held)] { EXPECT_EQ(*held, 1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(watch.expired()) << "the captures went before the stream passed the gate";
  EXPECT_FALSE(stream.idle());
  gate.open();
  stream.synchronize();
  EXPECT_TRUE(watch.expired());
  EXPECT_TRUE(stream.idle());
}

TEST(CudaStream, InFlightWorkIsBounded) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  auto& gpu = dynamic_cast<CudaDevice&>(manager->device("cuda:0"));
  CudaStreamImpl stream(gpu, /*index=*/7, gpu.ordinal(), /*max_in_flight=*/3);
  Gate gate;
  gate.close_on(stream);
  std::atomic<int> ran{0};
  for (int task = 0; task < 20; ++task) stream.enqueue_commands([&ran] { ran.fetch_add(1); });
  EXPECT_TRUE(eventually([&] { return stream.in_flight() == 3; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ran.load(), 2) << "the gate and two tasks fill the three slots; the rest wait for room";
  gate.open();
  stream.synchronize();
  EXPECT_EQ(ran.load(), 20);
  EXPECT_EQ(stream.peak_in_flight(), 3U);
  EXPECT_EQ(stream.in_flight(), 0U);
}

TEST(CudaStream, AWaitOnAnotherCudaStreamOrdersTheDeviceWithoutBlockingTheWorker) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options({}, /*streams=*/2));
  auto& gpu = dynamic_cast<CudaDevice&>(manager->device("cuda:0"));
  CudaStream& first = cuda_stream(gpu.stream(0));
  CudaStream& second = cuda_stream(gpu.stream(1));
  Gate gate;
  gate.close_on(first);
  const device::Event gated = first.record();
  second.wait(gated);
  std::atomic<bool> enqueued{false};
  second.enqueue_commands([&enqueued] { enqueued.store(true); });
  const device::Event after = second.record();
  // The worker of `second` went past the wait (cudaStreamWaitEvent) and ran the command task ...
  EXPECT_TRUE(eventually([&] { return enqueued.load(); }));
  // ... while the device holds `second` behind the gate.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(after.query());
  EXPECT_FALSE(gated.query());
  gate.open();
  after.synchronize();
  EXPECT_TRUE(gated.query());
  first.synchronize();
  second.synchronize();
}

TEST(CudaStream, AFailedCallInATaskIsKeptNamingIt) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  CudaStream& stream = cuda_stream(manager->device("cuda:0").stream());
  // A device that does not exist: refused at once (cudaErrorInvalidDevice), nothing reaches the GPU and
  // nothing sticks to the context.
  stream.enqueue_commands([] {
    cudaDeviceProp properties{};
    check(cudaGetDeviceProperties(&properties, -1), "cudaGetDeviceProperties(-1)");
  });
  bool skipped = true;
  stream.enqueue_commands([&skipped] { skipped = false; });  // behind the error: not run
  const std::string message = message_of([&] { stream.synchronize(); });
  EXPECT_NE(message.find("cudaGetDeviceProperties(-1) failed: cudaErrorInvalidDevice"), std::string::npos) << message;
  EXPECT_TRUE(skipped);
  EXPECT_NO_THROW(stream.synchronize());
  bool ran = false;
  stream.enqueue_commands([&ran] { ran = true; });
  stream.synchronize();
  EXPECT_TRUE(ran) << "the stream runs again once the error was reported";
}

// The label check's pattern (cuda_kernel_support.hpp): a command registers an after_completion check; the
// completer runs it once the device passed the command's work, and the worker goes on meanwhile.
TEST(CudaStream, AnAfterCompletionCheckRunsOnceTheWorkCompletedWithoutHoldingTheWorker) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  CudaStream& stream = cuda_stream(manager->device("cuda:0").stream());
  Gate gate;
  gate.close_on(stream);
  std::atomic<bool> checked{false};
  stream.enqueue_commands([&stream, &checked] {
    stream.after_completion([&checked] {
      checked.store(true);
      TP_THROW(InvalidArgument, "test", "the check found a bad value");
    });
  });
  std::atomic<bool> behind{false};
  stream.enqueue_commands([&behind] { behind.store(true); });
  // The worker ran the command behind the check while the device is still held at the gate ...
  EXPECT_TRUE(eventually([&] { return behind.load(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(checked.load()) << "the check ran before the device passed the command's work";
  EXPECT_FALSE(stream.failed());
  gate.open();
  // ... and the check's error is the stream's, at the next synchronize.
  const std::string message = message_of([&] { stream.synchronize(); });
  EXPECT_TRUE(checked.load());
  EXPECT_NE(message.find("the check found a bad value"), std::string::npos) << message;
  EXPECT_NO_THROW(stream.synchronize());
}

TEST(CudaStream, AfterCompletionOutsideACommandIsRefused) {
  TP_REQUIRE_CUDA();
  const auto manager = make_manager(cuda_options());
  CudaStream& stream = cuda_stream(manager->device("cuda:0").stream());
  const std::string message = message_of([&] { stream.after_completion([] {}); });
  EXPECT_NE(message.find("only inside a command task"), std::string::npos) << message;
}

}  // namespace
}  // namespace tp::backend::cuda

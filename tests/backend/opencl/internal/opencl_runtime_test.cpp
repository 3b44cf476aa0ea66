// SPDX-License-Identifier: Apache-2.0
// The OpenCL backend's internals (src/backend/opencl): error names, the memory source's two region kinds
// (SVM regions whose cl_mem aliases the SVM memory, and plain buffers behind reserved addresses), launches
// through enqueue() and LaunchContext::kernel(), stream order and stream-ordered reuse with real commands,
// errors kept by the stream, and program build failures with their log. The asynchronous streams
// (opencl_stream.hpp): commands in flight behind a user event (a Gate) while the host goes on, device-side
// waits between streams, stream-ordered reuse, failed commands, and destruction with work pending. Built only with the OpenCL backend;
// skips, saying why, on a machine without an OpenCL device.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "backend/opencl/opencl_context.hpp"
#include "backend/opencl/opencl_device.hpp"
#include "backend/opencl/opencl_launch.hpp"
#include "backend/opencl/opencl_memory.hpp"
#include "backend/opencl/opencl_stream.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/tensor.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::backend::opencl {
namespace {

memory::MemoryConfig config_of(std::size_t limit_bytes) {
  memory::MemoryConfig config;
  config.device = "opencl:0";
  config.policy = memory::GrowthPolicy::grow;
  config.limit_bytes = limit_bytes;
  return config;
}

std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

// True once `condition` holds, polling for up to 10 s (false then).
bool eventually(const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A user event that holds back every command enqueued behind hold() until open(); the destructor opens it,
// so a failing test never leaves a device waiting forever (declare it after the device).
class Gate {
 public:
  explicit Gate(cl_context context) {
    cl_int status = CL_SUCCESS;
    event_ = clCreateUserEvent(context, &status);
    check(status, "clCreateUserEvent");
  }
  ~Gate() {
    open();
    clReleaseEvent(event_);
  }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  void open() {
    if (!opened_.exchange(true)) check(clSetUserEventStatus(event_, CL_COMPLETE), "clSetUserEventStatus");
  }
  // Enqueues on `stream` a launch whose barrier stops its queue until the gate opens.
  void hold(device::Stream& stream) const {
    enqueue(stream, [event = event_](LaunchContext& context) {
      check(clEnqueueBarrierWithWaitList(context.queue(), 1, &event, nullptr), "clEnqueueBarrierWithWaitList");
    });
  }

 private:
  cl_event event_ = nullptr;
  std::atomic<bool> opened_{false};
};

class OpenClRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device::opencl_physical_devices().empty()) {
      GTEST_SKIP() << "no OpenCL device: " << device::opencl_unavailable_reason();
    }
  }
  static std::unique_ptr<device::Device> make(device::DeviceOptions options = {}) {
    return device::make_opencl_device({device::DeviceKind::opencl, 0}, {device::DeviceKind::opencl, 0}, 256 * kMiB,
                                      config_of(64 * kMiB), options);
  }
  static OpenClDevice& opencl(device::Device& device) { return dynamic_cast<OpenClDevice&>(device); }
  static OpenClStream& stream_of(device::Device& device, std::size_t index = 0) {
    return dynamic_cast<OpenClStream&>(device.stream(index));
  }
  // Every element of `tensor` (float32) = value, on `stream`, with a fill command.
  static void fill(device::Stream& stream, const Tensor& tensor, float value) {
    enqueue(stream, [tensor, value](LaunchContext& context) {
      const DeviceSpan span = context.span(tensor);
      check(clEnqueueFillBuffer(context.queue(), span.buffer, &value, sizeof value, span.offset, tensor.nbytes(), 0,
                                nullptr, nullptr),
            "clEnqueueFillBuffer");
    });
  }

  // data[i] += value for every element of `tensor` (float32), on `stream`.
  static void add_scalar(device::Stream& stream, const Tensor& tensor, float value) {
    enqueue(stream, [tensor, value](LaunchContext& context) {
      const DeviceSpan span = context.span(tensor);
      cl_kernel kernel = context.kernel("selftest", "add_scalar_f32");
      const cl_ulong offset = span.offset / sizeof(float);
      const cl_ulong count = static_cast<cl_ulong>(tensor.num_elements());
      check(clSetKernelArg(kernel, 0, sizeof(cl_mem), &span.buffer), "clSetKernelArg");
      check(clSetKernelArg(kernel, 1, sizeof offset, &offset), "clSetKernelArg");
      check(clSetKernelArg(kernel, 2, sizeof value, &value), "clSetKernelArg");
      check(clSetKernelArg(kernel, 3, sizeof count, &count), "clSetKernelArg");
      const std::size_t global = static_cast<std::size_t>(count);
      check(clEnqueueNDRangeKernel(context.queue(), kernel, 1, nullptr, &global, nullptr, 0, nullptr, nullptr),
            "clEnqueueNDRangeKernel");
    });
  }
  // Every element of `tensor` = value, after a long loop per element, on `stream`.
  static void slow_store(device::Stream& stream, const Tensor& tensor, float value, cl_uint rounds) {
    enqueue(stream, [tensor, value, rounds](LaunchContext& context) {
      const DeviceSpan span = context.span(tensor);
      cl_kernel kernel = context.kernel("selftest", "slow_store_f32");
      const cl_ulong offset = span.offset / sizeof(float);
      check(clSetKernelArg(kernel, 0, sizeof(cl_mem), &span.buffer), "clSetKernelArg");
      check(clSetKernelArg(kernel, 1, sizeof offset, &offset), "clSetKernelArg");
      check(clSetKernelArg(kernel, 2, sizeof value, &value), "clSetKernelArg");
      check(clSetKernelArg(kernel, 3, sizeof rounds, &rounds), "clSetKernelArg");
      const std::size_t global = static_cast<std::size_t>(tensor.num_elements());
      check(clEnqueueNDRangeKernel(context.queue(), kernel, 1, nullptr, &global, nullptr, 0, nullptr, nullptr),
            "clEnqueueNDRangeKernel");
    });
  }
};

TEST(OpenClErrors, EveryStandardCodeHasItsName) {
  EXPECT_EQ(error_name(CL_SUCCESS), "CL_SUCCESS");
  EXPECT_EQ(error_name(CL_INVALID_VALUE), "CL_INVALID_VALUE");
  EXPECT_EQ(error_name(CL_MEM_OBJECT_ALLOCATION_FAILURE), "CL_MEM_OBJECT_ALLOCATION_FAILURE");
  EXPECT_EQ(error_name(CL_BUILD_PROGRAM_FAILURE), "CL_BUILD_PROGRAM_FAILURE");
  EXPECT_EQ(error_name(CL_INVALID_KERNEL_NAME), "CL_INVALID_KERNEL_NAME");
  EXPECT_EQ(error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
  EXPECT_EQ(error_name(12345), "CL_UNKNOWN_ERROR");
  for (cl_int code = -1; code >= -19; --code) EXPECT_NE(error_name(code), "CL_UNKNOWN_ERROR") << code;
  for (cl_int code = -30; code >= -72; --code) EXPECT_NE(error_name(code), "CL_UNKNOWN_ERROR") << code;
}

TEST(OpenClErrors, AFailedCallIsADeviceErrorNamingTheCallAndTheCode) {
  EXPECT_NO_THROW(check(CL_SUCCESS, "clFinish"));
  const std::string text = message_of([] { check(CL_INVALID_COMMAND_QUEUE, "clFinish"); });
  EXPECT_NE(text.find("clFinish failed: CL_INVALID_COMMAND_QUEUE (-36)"), std::string::npos) << text;
  EXPECT_THROW(check(CL_OUT_OF_RESOURCES, "clEnqueueNDRangeKernel"), DeviceError);
}

// The design rests on this: a cl_mem created with CL_MEM_USE_HOST_PTR on coarse-grained SVM memory is that
// memory. Written through the buffer, read through the SVM pointer, and the other way round.
TEST_F(OpenClRuntime, AnSvmRegionAndItsBufferAreTheSameMemory) {
  auto context = OpenClContext::acquire(0);
  if (!context->properties().svm_coarse_grain_buffer) GTEST_SKIP() << "the device has no coarse-grained SVM";
  OpenClDeviceMemory source(context, 64 * kMiB, RegionKind::svm, "svm");
  void* ptr = source.allocate(kMiB);
  const DeviceSpan span = source.find(static_cast<char*>(ptr) + 4096, 1024);
  cl_int status = CL_SUCCESS;
  cl_command_queue queue = clCreateCommandQueueWithProperties(context->context(), context->device(), nullptr, &status);
  check(status, "clCreateCommandQueueWithProperties");
  std::vector<std::uint8_t> written(1024);
  std::iota(written.begin(), written.end(), std::uint8_t{7});
  check(clEnqueueWriteBuffer(queue, span.buffer, CL_TRUE, span.offset, written.size(), written.data(), 0, nullptr,
                             nullptr),
        "clEnqueueWriteBuffer");
  std::vector<std::uint8_t> read(written.size());
  check(
      clEnqueueSVMMemcpy(queue, CL_TRUE, read.data(), static_cast<char*>(ptr) + 4096, read.size(), 0, nullptr, nullptr),
      "clEnqueueSVMMemcpy");
  EXPECT_EQ(read, written);
  const std::vector<std::uint8_t> through_svm(1024, 0x5C);
  check(clEnqueueSVMMemcpy(queue, CL_TRUE, static_cast<char*>(ptr) + 4096, through_svm.data(), through_svm.size(), 0,
                           nullptr, nullptr),
        "clEnqueueSVMMemcpy");
  check(clEnqueueReadBuffer(queue, span.buffer, CL_TRUE, span.offset, read.size(), read.data(), 0, nullptr, nullptr),
        "clEnqueueReadBuffer");
  EXPECT_EQ(read, through_svm);
  clReleaseCommandQueue(queue);
  source.deallocate(ptr, kMiB);
  EXPECT_EQ(source.stats().bytes_reserved, 0u);
}

// Fine-grained SVM: host code writes the memory directly, a kernel reads and writes it through the region's
// cl_mem, and host code reads the kernel's result once the queue has finished, without a map.
TEST_F(OpenClRuntime, SharedRegionsAreTouchedByHostCodeAndKernelsAlike) {
  auto context = OpenClContext::acquire(0);
  if (!context->properties().svm_fine_grain_buffer) GTEST_SKIP() << "the device has no fine-grained buffer SVM";
  OpenClDeviceMemory source(context, 64 * kMiB, RegionKind::shared, "shared");
  constexpr std::size_t kCount = 1000;
  auto* values = static_cast<float*>(source.allocate(kCount * sizeof(float)));
  for (std::size_t i = 0; i < kCount; ++i) values[i] = static_cast<float>(i);
  const DeviceSpan span = source.find(values + 100, 50 * sizeof(float));
  cl_int status = CL_SUCCESS;
  cl_command_queue queue = clCreateCommandQueueWithProperties(context->context(), context->device(), nullptr, &status);
  check(status, "clCreateCommandQueueWithProperties");
  cl_kernel kernel = clCreateKernel(context->program("selftest"), "add_scalar_f32", &status);
  check(status, "clCreateKernel");
  const cl_ulong offset = span.offset / sizeof(float);
  const float value = 0.25f;
  const cl_ulong count = 50;
  check(clSetKernelArg(kernel, 0, sizeof(cl_mem), &span.buffer), "clSetKernelArg");
  check(clSetKernelArg(kernel, 1, sizeof offset, &offset), "clSetKernelArg");
  check(clSetKernelArg(kernel, 2, sizeof value, &value), "clSetKernelArg");
  check(clSetKernelArg(kernel, 3, sizeof count, &count), "clSetKernelArg");
  const std::size_t global = count;
  check(clEnqueueNDRangeKernel(queue, kernel, 1, nullptr, &global, nullptr, 0, nullptr, nullptr),
        "clEnqueueNDRangeKernel");
  check(clFinish(queue), "clFinish");
  for (std::size_t i = 0; i < kCount; ++i) {
    const float expected = static_cast<float>(i) + (i >= 100 && i < 150 ? 0.25f : 0.0f);
    ASSERT_EQ(values[i], expected) << "element " << i;
  }
  clReleaseKernel(kernel);
  clReleaseCommandQueue(queue);
  source.deallocate(values, kCount * sizeof(float));
  EXPECT_EQ(source.stats().bytes_in_use, 0u);
}

TEST_F(OpenClRuntime, RegionsAreFoundByAddressAndAlignedForTheAllocators) {
  auto context = OpenClContext::acquire(0);
  for (const RegionKind kind : {RegionKind::svm, RegionKind::reserved, RegionKind::shared}) {
    if (kind == RegionKind::svm && !context->properties().svm_coarse_grain_buffer) continue;
    if (kind == RegionKind::shared && !context->properties().svm_fine_grain_buffer) continue;
    SCOPED_TRACE(kind == RegionKind::svm ? "svm" : kind == RegionKind::shared ? "shared" : "reserved");
    OpenClDeviceMemory source(context, 8 * kMiB, kind, "regions");
    char* first = static_cast<char*>(source.allocate(3 * kMiB, 4096));
    char* second = static_cast<char*>(source.allocate(kMiB, 256));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 4096, 0u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(second) % 256, 0u);
    const DeviceSpan start = source.find(first, 3 * kMiB);
    const DeviceSpan middle = source.find(first + 1000, 10);
    EXPECT_EQ(start.buffer, middle.buffer);
    EXPECT_EQ(middle.offset, start.offset + 1000);
    EXPECT_NE(source.find(second, kMiB).buffer, start.buffer);
    EXPECT_THROW((void)source.find(first + 3 * kMiB - 4, 8), DeviceError);  // runs past the region
    // The capacity is a hard wall.
    EXPECT_THROW((void)source.allocate(5 * kMiB), OutOfMemoryError);
    EXPECT_EQ(source.stats().num_ooms, 1u);
    source.deallocate(first, 3 * kMiB);
    EXPECT_THROW((void)source.find(first, 1), DeviceError);  // freed
    source.deallocate(second, kMiB);
    EXPECT_EQ(source.stats().bytes_in_use, 0u);
  }
}

TEST_F(OpenClRuntime, AKernelLaunchRunsOnTheTensorsBytes) {
  auto device = make();
  std::vector<float> values(1000);
  std::iota(values.begin(), values.end(), 0.0f);
  const Tensor whole = Tensor::from_vector<float>(values, Shape{10, 100}, *device);
  const Tensor rows = whole.slice(2, 4);  // a view at an offset inside the buffer
  add_scalar(device->stream(), rows, 0.5f);
  const std::vector<float> back = whole.to_vector<float>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float expected = (i >= 200 && i < 400) ? values[i] + 0.5f : values[i];
    ASSERT_EQ(back[i], expected) << "element " << i;
  }
}

TEST_F(OpenClRuntime, LaunchesRunInStreamOrderAndEventsOrderStreams) {
  auto device = make(device::DeviceOptions{.num_streams = 2});
  const std::vector<float> zeros(4096, 0.0f);
  const Tensor tensor = Tensor::from_vector<float>(zeros, Shape{4096}, *device);
  device->stream(0).synchronize();
  // A long store on stream 1, then (after its event) additions on stream 0: the additions see the store.
  slow_store(device->stream(1), tensor, 100.0f, 20000);
  device->stream(0).wait(device->stream(1).record());
  for (int i = 0; i < 20; ++i) add_scalar(device->stream(0), tensor, 1.0f);
  const std::vector<float> back = tensor.to_vector<float>(&device->stream(0));
  EXPECT_EQ(back, std::vector<float>(4096, 120.0f));
}

TEST_F(OpenClRuntime, ABufferDroppedUnderPendingWorkReturnsOnlyAfterIt) {
  auto device = make();
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  {
    const Tensor tensor = Tensor::empty(Shape{1 << 16}, DType::f32, *device);
    // The launch waits for the gate, then enqueues a long kernel on the tensor.
    enqueue(device->stream(), [tensor, opened](LaunchContext& context) {
      opened.wait();
      const DeviceSpan span = context.span(tensor);
      cl_kernel kernel = context.kernel("selftest", "slow_store_f32");
      const cl_ulong offset = span.offset / sizeof(float);
      const float value = 1.0f;
      const cl_uint rounds = 2000;
      check(clSetKernelArg(kernel, 0, sizeof(cl_mem), &span.buffer), "clSetKernelArg");
      check(clSetKernelArg(kernel, 1, sizeof offset, &offset), "clSetKernelArg");
      check(clSetKernelArg(kernel, 2, sizeof value, &value), "clSetKernelArg");
      check(clSetKernelArg(kernel, 3, sizeof rounds, &rounds), "clSetKernelArg");
      const std::size_t global = static_cast<std::size_t>(tensor.num_elements());
      check(clEnqueueNDRangeKernel(context.queue(), kernel, 1, nullptr, &global, nullptr, 0, nullptr, nullptr),
            "clEnqueueNDRangeKernel");
    });
  }  // the host's last handle goes; the launch still holds the tensor
  EXPECT_EQ(device->memory().stats().bytes_requested, std::size_t{1} << 18) << "freed under pending work";
  EXPECT_EQ(device->live_buffers(), 1u);
  gate.set_value();
  device->synchronize();
  EXPECT_EQ(device->memory().stats().bytes_requested, 0u);
  EXPECT_EQ(device->live_buffers(), 0u);
}

TEST_F(OpenClRuntime, HostTasksRunInStreamOrderBetweenLaunches) {
  auto device = make();
  const Tensor tensor = Tensor::from_vector<float>(std::vector<float>(16, 0.0f), Shape{16}, *device);
  std::atomic<int> order{0};
  int seen_at = -1;
  add_scalar(device->stream(), tensor, 1.0f);
  device->stream().enqueue([&] { seen_at = order++; });
  add_scalar(device->stream(), tensor, 1.0f);
  device->synchronize();
  EXPECT_EQ(seen_at, 0);
  EXPECT_EQ(tensor.to_vector<float>(), std::vector<float>(16, 2.0f));
}

TEST_F(OpenClRuntime, ALaunchErrorIsKeptByTheStreamAndReportedAtSynchronize) {
  auto device = make();
  enqueue(device->stream(), [](LaunchContext& context) { (void)context.kernel("selftest", "no_such_kernel"); });
  const std::string text = message_of([&] { device->stream().synchronize(); });
  EXPECT_NE(text.find("CL_INVALID_KERNEL_NAME"), std::string::npos) << text;
  // The stream is usable again.
  const Tensor tensor = Tensor::from_vector<float>(std::vector<float>(4, 1.0f), Shape{4}, *device);
  add_scalar(device->stream(), tensor, 1.0f);
  EXPECT_EQ(tensor.to_vector<float>(), std::vector<float>(4, 2.0f));
  // Launching on a stream of another kind of device is refused at once.
  auto sim = device::make_sim_device({device::DeviceKind::sim, 0}, {device::DeviceKind::sim, 0}, 64 * kMiB,
                                     config_of(64 * kMiB), {});
  EXPECT_THROW(enqueue(sim->stream(), [](LaunchContext&) {}), InvalidArgument);
}

TEST_F(OpenClRuntime, AProgramThatDoesNotBuildShowsItsBuildLog) {
  auto context = OpenClContext::acquire(0);
  const std::string text = message_of([&] {
    (void)build_program(context->context(), context->device(), "broken", {},
                        "__kernel void f(__global float* x) { x[0] = y; }", context->build_options());
  });
  EXPECT_NE(text.find("clBuildProgram failed for program 'broken'"), std::string::npos) << text;
  EXPECT_NE(text.find("CL_BUILD_PROGRAM_FAILURE"), std::string::npos) << text;
  EXPECT_NE(text.find("build log:"), std::string::npos) << text;
  EXPECT_NE(text.find("y"), std::string::npos) << text;
  const std::string unknown = message_of([&] { context->program("no_such_program"); });
  EXPECT_NE(unknown.find("selftest"), std::string::npos) << unknown;  // lists the programs there are
}

TEST_F(OpenClRuntime, ProgramsAreBuiltOncePerPhysicalDeviceAndKernelsPerStream) {
  auto first = make(device::DeviceOptions{.num_streams = 2});
  auto second = make();
  OpenClDevice& one = opencl(*first);
  OpenClDevice& two = opencl(*second);
  EXPECT_EQ(&one.context(), &two.context());
  EXPECT_EQ(one.context().program("selftest"), two.context().program("selftest"));
  cl_kernel stream0 = nullptr;
  cl_kernel stream0_again = nullptr;
  cl_kernel stream1 = nullptr;
  enqueue(first->stream(0), [&](LaunchContext& context) { stream0 = context.kernel("selftest", "add_scalar_f32"); });
  enqueue(first->stream(0),
          [&](LaunchContext& context) { stream0_again = context.kernel("selftest", "add_scalar_f32"); });
  enqueue(first->stream(1), [&](LaunchContext& context) { stream1 = context.kernel("selftest", "add_scalar_f32"); });
  first->synchronize();
  EXPECT_NE(stream0, nullptr);
  EXPECT_EQ(stream0, stream0_again);
  EXPECT_NE(stream0, stream1);
}

TEST_F(OpenClRuntime, ATensorOfAnotherContextOrKindIsNotReachable) {
  auto device = make();
  auto sim = device::make_sim_device({device::DeviceKind::sim, 0}, {device::DeviceKind::sim, 0}, 64 * kMiB,
                                     config_of(64 * kMiB), {});
  const Tensor on_sim = Tensor::from_vector<float>(std::vector<float>(4, 1.0f), Shape{4}, *sim);
  enqueue(device->stream(), [on_sim](LaunchContext& context) { (void)context.span(on_sim); });
  const std::string text = message_of([&] { device->stream().synchronize(); });
  EXPECT_NE(text.find("cannot reach memory of sim:0"), std::string::npos) << text;
}

// A launch returns as soon as its commands are enqueued: behind a closed gate the worker keeps enqueueing
// until max_in_flight() markers are outstanding, and no more; a host task behind them runs only once all of
// them have completed.
TEST_F(OpenClRuntime, LaunchesStayInFlightUpToTheStreamsBound) {
  auto device = make();
  const Tensor tensor = Tensor::from_vector<float>(std::vector<float>(256, 0.0f), Shape{256}, *device);
  device->synchronize();
  OpenClStream& stream = stream_of(*device);
  Gate gate(opencl(*device).context().context());
  const std::size_t bound = stream.max_in_flight();
  ASSERT_GT(bound, 1u);
  gate.hold(stream);
  for (std::size_t i = 0; i < 3 * bound; ++i) add_scalar(stream, tensor, 1.0f);
  std::atomic<std::size_t> in_flight_at_host_task{999};
  stream.enqueue([&] { in_flight_at_host_task = stream.in_flight(); });
  ASSERT_TRUE(eventually([&] { return stream.in_flight() == bound; })) << stream.in_flight();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(stream.in_flight(), bound);  // the worker waits for room
  EXPECT_FALSE(stream.idle());
  EXPECT_EQ(in_flight_at_host_task.load(), 999u);
  gate.open();
  device->synchronize();
  EXPECT_EQ(in_flight_at_host_task.load(), 0u);
  EXPECT_EQ(stream.in_flight(), 0u);
  EXPECT_EQ(stream.peak_in_flight(), bound);
  EXPECT_EQ(tensor.to_vector<float>(), std::vector<float>(256, static_cast<float>(3 * bound)));
}

// record() on stream 0 is a marker and wait() on stream 1 a barrier on it: stream 1's worker enqueues its
// barrier and its commands while stream 0 is held back, and the commands still see stream 0's store.
TEST_F(OpenClRuntime, AnEventOrdersAnotherStreamOnTheDeviceWithoutBlockingIt) {
  auto device = make(device::DeviceOptions{.num_streams = 2});
  const Tensor tensor = Tensor::from_vector<float>(std::vector<float>(4096, 0.0f), Shape{4096}, *device);
  device->synchronize();
  Gate gate(opencl(*device).context().context());
  gate.hold(device->stream(0));
  slow_store(device->stream(0), tensor, 100.0f, 10);  // stores exactly 100 (the loop stays below 3)
  const device::Event stored = device->stream(0).record();
  device->stream(1).wait(stored);
  add_scalar(device->stream(1), tensor, 1.0f);  // 101 after the store; 100 if it ran first
  const device::Event added = device->stream(1).record();
  // Barrier, launch and record are on stream 1's queue; its worker is free.
  EXPECT_TRUE(eventually([&] { return stream_of(*device, 1).in_flight() == 3; })) << stream_of(*device, 1).in_flight();
  EXPECT_FALSE(stored.query());
  EXPECT_FALSE(added.query());
  gate.open();
  added.synchronize();
  // Stream 0's marker has run on the device; its Event is completed host-side by stream 0's own completer,
  // which may retire it just after stream 1's completer retired `added`.
  EXPECT_TRUE(eventually([&] { return stored.query(); }));
  EXPECT_EQ(tensor.to_vector<float>(&device->stream(1)), std::vector<float>(4096, 101.0f));
  // Two devices of one context order each other the same way.
  auto other = make();
  ASSERT_EQ(&opencl(*other).context(), &opencl(*device).context());
  const Tensor there = Tensor::empty(Shape{4096}, DType::f32, *other);
  Gate second(opencl(*device).context().context());
  second.hold(device->stream(0));
  fill(device->stream(0), tensor, 7.0f);
  other->stream().wait(device->stream(0).record());
  enqueue(other->stream(), [tensor, there](LaunchContext& context) {
    const DeviceSpan from = context.span(tensor);
    const DeviceSpan to = context.span(there);
    check(clEnqueueCopyBuffer(context.queue(), from.buffer, to.buffer, from.offset, to.offset, tensor.nbytes(), 0,
                              nullptr, nullptr),
          "clEnqueueCopyBuffer");
  });
  EXPECT_TRUE(eventually([&] { return stream_of(*other).in_flight() == 2; }));
  second.open();
  EXPECT_EQ(there.to_vector<float>(), std::vector<float>(4096, 7.0f));
}

// An event of another kind of device is a host wait: the stream's later commands start only after it.
TEST_F(OpenClRuntime, AnotherDevicesEventHoldsTheStreamsLaterCommands) {
  auto device = make();
  auto sim = device::make_sim_device({device::DeviceKind::sim, 0}, {device::DeviceKind::sim, 0}, 64 * kMiB,
                                     config_of(64 * kMiB), {});
  const Tensor tensor = Tensor::from_vector<float>(std::vector<float>(64, 0.0f), Shape{64}, *device);
  device->synchronize();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  sim->stream().enqueue([released] { released.wait(); });
  device->stream().wait(sim->stream().record());
  add_scalar(device->stream(), tensor, 1.0f);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(stream_of(*device).in_flight(), 0u);  // nothing enqueued past the wait
  EXPECT_FALSE(device->stream().idle());
  release.set_value();
  EXPECT_EQ(tensor.to_vector<float>(), std::vector<float>(64, 1.0f));
}

// A buffer the host drops while a command that writes it waits behind the gate is not handed out again:
// another stream's allocation of the same size gets other memory, and the pending store does not land in it.
TEST_F(OpenClRuntime, ABufferDroppedUnderCommandsInFlightIsNotHandedOutAgain) {
  auto device = make(device::DeviceOptions{.num_streams = 2, .poison_freed = true});
  OpenClDevice& cl = opencl(*device);
  Gate gate(cl.context().context());
  constexpr std::size_t kCount = 1 << 16;
  DeviceSpan dropped_span;
  {
    const Tensor dropped = Tensor::empty(Shape{kCount}, DType::f32, *device);
    dropped_span = cl.span(*dropped.buffer(), 0, dropped.nbytes());
    gate.hold(device->stream(0));
    slow_store(device->stream(0), dropped, 7.0f, 10);
  }
  EXPECT_EQ(device->live_buffers(), 1u);
  const Tensor reused = Tensor::empty(Shape{kCount}, DType::f32, *device);
  const DeviceSpan reused_span = cl.span(*reused.buffer(), 0, reused.nbytes());
  EXPECT_FALSE(reused_span.buffer == dropped_span.buffer && reused_span.offset == dropped_span.offset);
  EXPECT_EQ(device->memory().stats().bytes_requested, 2 * kCount * sizeof(float));
  fill(device->stream(1), reused, 1.0f);
  EXPECT_EQ(reused.to_vector<float>(&device->stream(1)), std::vector<float>(kCount, 1.0f));
  gate.open();
  device->synchronize();
  EXPECT_EQ(device->live_buffers(), 1u);
  EXPECT_EQ(device->memory().stats().bytes_requested, kCount * sizeof(float));
  EXPECT_EQ(reused.to_vector<float>(&device->stream(1)), std::vector<float>(kCount, 1.0f));
}

// A launch that throws after enqueueing a command is the stream's error: its command still runs (its
// captures stay until then), the launch and the host task behind it are skipped, the recorded event still
// completes, and synchronize() reports the error. (A command failing on the device takes the same path
// through its marker's status; PoCL 3.1 cannot be made to fail one safely: a failed user event with a
// thread waiting on a later command aborts or hangs inside PoCL.)
TEST_F(OpenClRuntime, ALaunchErrorSkipsLaterTasksAndEventsStillComplete) {
  auto device = make();
  const Tensor tensor = Tensor::from_vector<float>(std::vector<float>(16, 0.0f), Shape{16}, *device);
  device->synchronize();
  enqueue(device->stream(), [tensor](LaunchContext& context) {
    const DeviceSpan span = context.span(tensor);
    const float value = 5.0f;
    check(clEnqueueFillBuffer(context.queue(), span.buffer, &value, sizeof value, span.offset, tensor.nbytes(), 0,
                              nullptr, nullptr),
          "clEnqueueFillBuffer");
    TP_THROW(DeviceError, "test", "the launch fails after its first command");
  });
  add_scalar(device->stream(), tensor, 1.0f);  // skipped
  bool ran = false;
  device->stream().enqueue([&] { ran = true; });  // skipped
  const device::Event recorded = device->stream().record();
  recorded.synchronize();
  EXPECT_TRUE(device->stream().failed());
  const std::string text = message_of([&] { device->stream().synchronize(); });
  EXPECT_NE(text.find("the launch fails after its first command"), std::string::npos) << text;
  EXPECT_FALSE(ran);
  EXPECT_EQ(tensor.to_vector<float>(), std::vector<float>(16, 5.0f));
}

// Destroying a device with commands held back waits for them (the gate opens from another thread), runs
// the host task behind them, and releases every capture.
TEST_F(OpenClRuntime, DestructionWithCommandsPendingWaitsAndReleasesTheirCaptures) {
  const auto context = OpenClContext::acquire(0);
  Gate gate(context->context());  // outlives the device
  auto sentinel = std::make_shared<int>(0);
  std::atomic<bool> host_task_ran{false};
  std::thread opener;
  {
    auto device = make();
    ASSERT_EQ(&opencl(*device).context(), context.get());
    {
      const Tensor tensor = Tensor::empty(Shape{1024}, DType::f32, *device);
      gate.hold(device->stream());
      for (int i = 0; i < 50; ++i) add_scalar(device->stream(), tensor, 1.0f);
      enqueue(device->stream(), [sentinel](LaunchContext&) {});
      device->stream().enqueue([&] { host_task_ran = true; });
    }
    EXPECT_GT(sentinel.use_count(), 1);
    opener = std::thread([&gate] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      gate.open();
    });
  }  // the device goes with its commands still held back
  opener.join();
  EXPECT_TRUE(host_task_ran);
  EXPECT_EQ(sentinel.use_count(), 1);
}

}  // namespace
}  // namespace tp::backend::opencl

// SPDX-License-Identifier: Apache-2.0
// Staging on opencl devices: OpenClStagingMemory hands out mapped CL_MEM_ALLOC_HOST_PTR buffers (the flags
// are the driver's answer, not ours), aligned, host-writable, and releases every buffer it created (counted by
// the driver's destructor callbacks); an opencl device's StagingPool stages through them, copies host ->
// device -> host through them give back the bytes for sizes of 1 B to several MiB at unaligned offsets, and
// its blocks are reused. Skips, saying why, on a machine without an OpenCL device.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/opencl/opencl_context.hpp"
#include "backend/opencl/opencl_device.hpp"
#include "backend/opencl/opencl_staging_memory.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::backend::opencl {
namespace {

// Counts the buffers the driver has destroyed, through clSetMemObjectDestructorCallback.
struct DestroyedBuffers {
  std::atomic<int> count{0};

  void watch(cl_mem buffer) {
    check(clSetMemObjectDestructorCallback(
              buffer, [](cl_mem, void* counter) { static_cast<std::atomic<int>*>(counter)->fetch_add(1); }, &count),
          "clSetMemObjectDestructorCallback");
  }
  // Waits (a driver may destroy a released buffer a little later) until `expected` are gone; the count then.
  int wait_for(int expected) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (count.load() < expected && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return count.load();
  }
};

cl_mem_flags flags_of(cl_mem buffer) {
  cl_mem_flags flags = 0;
  check(clGetMemObjectInfo(buffer, CL_MEM_FLAGS, sizeof flags, &flags, nullptr), "clGetMemObjectInfo(CL_MEM_FLAGS)");
  return flags;
}

std::size_t size_of(cl_mem buffer) {
  std::size_t size = 0;
  check(clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof size, &size, nullptr), "clGetMemObjectInfo(CL_MEM_SIZE)");
  return size;
}

class OpenClStaging : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device::opencl_physical_devices().empty()) {
      GTEST_SKIP() << "no OpenCL device: " << device::opencl_unavailable_reason();
    }
  }
  static std::unique_ptr<device::Device> make() {
    memory::MemoryConfig config;
    config.device = "opencl:0";
    config.policy = memory::GrowthPolicy::grow;
    config.limit_bytes = 64 * kMiB;
    return device::make_opencl_device({device::DeviceKind::opencl, 0}, {device::DeviceKind::opencl, 0}, 256 * kMiB,
                                      config, {});
  }
  static OpenClDevice& opencl(device::Device& device) { return dynamic_cast<OpenClDevice&>(device); }
};

TEST_F(OpenClStaging, HandsOutMappedAllocHostPtrBuffersAndReleasesEachOne) {
  auto resource = std::make_unique<OpenClStagingMemory>(OpenClContext::acquire(0), "test/staging");
  const std::shared_ptr<StagingBufferTable> table = resource->table();
  struct Request {
    std::size_t bytes;
    std::size_t alignment;
  };
  const std::vector<Request> requests{{1, 256}, {3 * kMiB + 5, 4096}, {4096, 256}, {100, 1024}};
  std::vector<void*> blocks;
  DestroyedBuffers destroyed;
  for (const Request& request : requests) {
    void* block = resource->allocate(request.bytes, request.alignment);
    blocks.push_back(block);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(block) % request.alignment, 0u) << request.bytes;
    const std::optional<DeviceSpan> span = table->lookup(block, request.bytes);
    ASSERT_TRUE(span.has_value()) << request.bytes << " bytes at " << block;
    const cl_mem_flags flags = flags_of(span->buffer);
    EXPECT_TRUE(flags & CL_MEM_ALLOC_HOST_PTR) << "flags " << flags;
    EXPECT_TRUE(flags & CL_MEM_READ_WRITE) << "flags " << flags;
    EXPECT_GE(size_of(span->buffer), span->offset + request.bytes);
    EXPECT_FALSE(table->lookup(static_cast<char*>(block) + 1, memory::round_up(request.bytes, 256)).has_value())
        << "a span past the block's end belongs to no buffer";
    std::memset(block, 0xab, request.bytes);  // the mapping is host-writable over every byte
    destroyed.watch(span->buffer);
  }
  std::set<cl_mem> distinct;
  for (std::size_t i = 0; i < blocks.size(); ++i) distinct.insert(table->lookup(blocks[i], 1)->buffer);
  EXPECT_EQ(distinct.size(), requests.size()) << "one buffer per upstream allocation";
  EXPECT_EQ(table->size(), requests.size());
  EXPECT_EQ(resource->stats().upstream_allocs, requests.size());

  resource->deallocate(blocks[1], requests[1].bytes);
  EXPECT_EQ(destroyed.wait_for(1), 1);
  EXPECT_EQ(table->size(), requests.size() - 1);
  EXPECT_FALSE(table->lookup(blocks[1], 1).has_value());
  EXPECT_EQ(resource->stats().upstream_frees, 1u);

  resource.reset();  // the rest are still live: the destructor unmaps and releases them
  EXPECT_EQ(destroyed.wait_for(static_cast<int>(requests.size())), static_cast<int>(requests.size()));
  EXPECT_EQ(table->size(), 0u);
}

TEST_F(OpenClStaging, ABufferPastTheDeviceLimitIsAnOutOfMemoryErrorNamingIt) {
  auto context = OpenClContext::acquire(0);
  const std::size_t largest = context->properties().max_allocation_bytes;
  if (largest == 0) GTEST_SKIP() << "the driver reports no CL_DEVICE_MAX_MEM_ALLOC_SIZE";
  OpenClStagingMemory resource(context, "test/staging");
  try {
    (void)resource.allocate(largest);
    FAIL() << "a staging buffer of " << largest << " bytes was accepted";
  } catch (const OutOfMemoryError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("CL_DEVICE_MAX_MEM_ALLOC_SIZE"), std::string::npos) << message;
    EXPECT_NE(message.find(context->properties().name), std::string::npos) << message;
    EXPECT_NE(message.find("test/staging"), std::string::npos) << message;
  }
  EXPECT_EQ(resource.table()->size(), 0u);
  EXPECT_EQ(resource.stats().num_ooms, 1u);
}

TEST_F(OpenClStaging, ADeviceStagesThroughAllocHostPtrBuffers) {
  auto device = make();
  OpenClDevice& ours = opencl(*device);
  EXPECT_EQ(device->staging_kind(), "CL_MEM_ALLOC_HOST_PTR");
  EXPECT_TRUE(ours.staging().pinned());
  EXPECT_EQ(ours.staging_buffers().size(), 0u) << "no staging buffer before the first copy";

  const auto buffer = device->allocate(kMiB);
  std::vector<unsigned char> source(kMiB, 0x5a);
  device->copy_from_host(device->stream(0), source.data(), buffer, 0, source.size());
  const device::HostReadback readback = device->read_to_host_async(device->stream(0), buffer, 0, kMiB);
  readback.ready.synchronize();
  device->synchronize();
  const std::optional<DeviceSpan> span = ours.staging_buffers().lookup(readback.bytes.get(), kMiB);
  ASSERT_TRUE(span.has_value()) << "the readback's staging block lies in no CL_MEM_ALLOC_HOST_PTR buffer";
  EXPECT_TRUE(flags_of(span->buffer) & CL_MEM_ALLOC_HOST_PTR);
  EXPECT_EQ(std::memcmp(readback.bytes.get(), source.data(), kMiB), 0);
  EXPECT_EQ(ours.staging().kind(), "CL_MEM_ALLOC_HOST_PTR") << "no fallback to pageable memory";
}

TEST_F(OpenClStaging, CopiesThroughStagingKeepEveryByteAtEverySizeAndOffset) {
  auto device = make();
  OpenClDevice& ours = opencl(*device);
  device::Stream& stream = device->stream(0);
  const std::vector<std::size_t> sizes{1, 3, 255, 256, 257, 4095, 4097, 65537, kMiB + 13, 5 * kMiB + 7};
  const std::vector<std::size_t> offsets{0, 1, 7, 4093};
  constexpr std::size_t kSpace = 6 * kMiB;
  const auto buffer = device->allocate(kSpace);
  std::vector<unsigned char> source(kSpace);
  std::vector<unsigned char> back(kSpace);
  constexpr std::uint32_t kSeed = 19;
  std::mt19937 random(kSeed);
  SCOPED_TRACE("seed " + std::to_string(kSeed));

  auto round = [&] {
    for (std::size_t bytes : sizes) {
      for (std::size_t offset : offsets) {
        SCOPED_TRACE(std::to_string(bytes) + " bytes at offset " + std::to_string(offset));
        for (std::size_t i = offset; i < offset + bytes; ++i) source[i] = static_cast<unsigned char>(random());
        device->copy_from_host(stream, source.data() + offset, buffer, offset, bytes);
        // Host <- device through a staging block.
        const device::HostReadback readback = device->read_to_host_async(stream, buffer, offset, bytes);
        readback.ready.synchronize();
        device->synchronize();
        ASSERT_TRUE(ours.staging_buffers().lookup(readback.bytes.get(), bytes).has_value());
        ASSERT_EQ(std::memcmp(readback.bytes.get(), source.data() + offset, bytes), 0);
        // Host <- device straight into pageable memory, at an unaligned host address.
        std::memset(back.data(), 0, kSpace);
        device->copy_to_host(stream, buffer, offset, back.data() + (offset ^ 3), bytes);
        ASSERT_EQ(std::memcmp(back.data() + (offset ^ 3), source.data() + offset, bytes), 0);
      }
    }
  };
  round();
  ASSERT_FALSE(HasFatalFailure());
  const std::size_t buffers_after_one_round = ours.staging_buffers().size();
  const memory::MemoryStats first = ours.staging().stats();
  EXPECT_GT(buffers_after_one_round, 0u);
  EXPECT_LT(buffers_after_one_round, 2 * sizes.size() * offsets.size()) << "BFC above: buffers are rare";

  round();  // the same traffic again: served by the same blocks, with no new buffer
  const memory::MemoryStats second = ours.staging().stats();
  EXPECT_EQ(ours.staging_buffers().size(), buffers_after_one_round);
  EXPECT_EQ(second.bytes_reserved, first.bytes_reserved);
  EXPECT_GE(second.num_allocs, first.num_allocs + 2 * sizes.size() * offsets.size());
  EXPECT_TRUE(ours.staging().pinned());
}

TEST_F(OpenClStaging, DestroyingTheDeviceReleasesEveryStagingBuffer) {
  auto device = make();
  OpenClDevice& ours = opencl(*device);
  DestroyedBuffers destroyed;
  std::set<cl_mem> seen;
  auto buffer = device->allocate(8 * kMiB);
  for (std::size_t bytes : {std::size_t{100}, kMiB, 3 * kMiB, 8 * kMiB}) {
    std::vector<unsigned char> source(bytes, 1);
    device->copy_from_host(device->stream(0), source.data(), buffer, 0, bytes);
    const device::HostReadback readback = device->read_to_host_async(device->stream(0), buffer, 0, bytes);
    readback.ready.synchronize();
    const std::optional<DeviceSpan> span = ours.staging_buffers().lookup(readback.bytes.get(), bytes);
    ASSERT_TRUE(span.has_value());
    if (seen.insert(span->buffer).second) destroyed.watch(span->buffer);
  }
  device->synchronize();
  EXPECT_EQ(destroyed.count.load(), 0) << "live staging buffers stay while the device does";
  const auto expected = static_cast<int>(seen.size());
  buffer.reset();
  device.reset();
  EXPECT_EQ(destroyed.wait_for(expected), expected);
}

TEST_F(OpenClStaging, TheDeviceManagerReportsTheStagingKind) {
  device::DeviceManagerOptions options;
  options.opencl_devices = 1;
  device::DeviceManager manager(options, [](const char*) -> const char* { return nullptr; });
  for (const device::DeviceInfo& info : manager.info()) {
    EXPECT_EQ(info.staging, info.kind == "opencl" ? "CL_MEM_ALLOC_HOST_PTR" : "pageable") << info.name;
  }
}

}  // namespace
}  // namespace tp::backend::opencl

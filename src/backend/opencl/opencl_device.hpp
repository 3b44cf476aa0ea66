// SPDX-License-Identifier: Apache-2.0
#pragma once
// OpenClDevice: a device on one OpenCL device (physical, or a logical share of one). Its memory stack sits on
// an OpenClDeviceMemory; each of its streams is an OpenClStream (opencl_stream.hpp) over the in-order command
// queue of the same index. A launch or copy on stream i enqueues its commands on queue i without waiting; the
// stream's marker behind them keeps the task's captures (buffers, staging blocks) until they have run, so a
// buffer is released only once its commands have completed (stream-ordered reuse, as on every backend).
// Events are marker cl_events: a stream of any device of the same context waits on them with a barrier on its
// queue. Host tasks (Stream::enqueue) run on the stream's worker after every earlier command has completed.
// Reads to host memory and writes from it are non-blocking: the host memory (a staging block, held by the
// task or by its caller until the stream's event) stays valid until the stream's marker behind the copy.
//
// Copies use clEnqueueReadBuffer / WriteBuffer / CopyBuffer on the stream's queue, staged through the
// device's StagingPool, whose memory is mapped CL_MEM_ALLOC_HOST_PTR buffers (OpenClStagingMemory): the
// driver's own pinned memory, which reads and writes take as their host pointer. The debug poison is a
// clEnqueueFillBuffer on a service queue of its own
// (buffers are released from whichever thread drops them). Devices of one context do not claim peer access:
// peer access would let the direct collectives touch device memory from host code, so copies between two
// opencl devices go through host staging (device::copy's path for non-peers).
//
// Kernel objects: clSetKernelArg is not thread-safe on one cl_kernel, so each stream has its own kernel
// objects, created on first use and touched only by that stream's worker (launches on one stream are enqueued
// one at a time). A kernel's arguments are captured when it is enqueued, so the next launch may set them
// again while earlier launches of the same kernel are still in flight.

#include <CL/cl.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/opencl/opencl_context.hpp"
#include "backend/opencl/opencl_launch.hpp"
#include "backend/opencl/opencl_memory.hpp"
#include "backend/opencl/opencl_staging_memory.hpp"
#include "backend/opencl/opencl_stream.hpp"
#include "device/staging_pool.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::opencl {

class OpenClDevice final : public device::Device {
 public:
  // `source` is the OpenClDeviceMemory at the bottom of `memory` (owned by it). `shared`, when given, is the
  // device's shared memory (Device::shared_memory()) over `shared_source`, a RegionKind::shared source.
  OpenClDevice(device::DeviceId id, device::DeviceId physical_id, std::size_t capacity_bytes,
               std::unique_ptr<memory::MemoryStack> memory, OpenClDeviceMemory& source,
               std::shared_ptr<OpenClContext> context, const device::DeviceOptions& options,
               std::shared_ptr<memory::MemoryStack> shared = nullptr,
               const OpenClDeviceMemory* shared_source = nullptr);
  ~OpenClDevice() override;

  bool host_accessible() const noexcept override { return false; }

  OpenClContext& context() const noexcept { return *context_; }
  const OpenClDeviceMemory& source() const noexcept { return source_; }
  // The command queue of stream `index`.
  cl_command_queue queue(std::size_t index) const { return queues_.at(index); }
  // The buffer and offset of `bytes` at `offset` in `buffer` (of this device, or of an opencl device of the
  // same context). Throws tp::DeviceError for a buffer of another kind of device or another context.
  [[nodiscard]] DeviceSpan span(const Buffer& buffer, std::size_t offset, std::size_t bytes) const;
  // Stream `index`'s status word (LaunchContext::status_word): 4 bytes outside the memory stack.
  DeviceSpan status_word(std::size_t index) const { return {status_words_.at(index), 0}; }
  // Stream `index`'s own kernel `name` of program `program`; only that stream's worker may call it.
  cl_kernel kernel(std::size_t index, std::string_view program, std::string_view name);
  // Enqueues `launch` on `stream` (one of this device's): see opencl_launch.hpp's enqueue().
  void launch(device::Stream& stream, Launch launch);
  const device::StagingPool& staging() const noexcept { return *staging_; }
  std::string staging_kind() const override { return staging_->kind(); }
  // The live CL_MEM_ALLOC_HOST_PTR buffers behind staging(): which one holds a staging block, and where.
  const StagingBufferTable& staging_buffers() const noexcept { return *staging_buffers_; }
  // How many copies from one of this device's buffers to another it has enqueued (device::copy within the
  // device): what a session's feed of a tensor already on the device costs unless it is bound in place.
  std::uint64_t copies_within() const noexcept { return copies_within_.load(std::memory_order_relaxed); }

 private:
  void enqueue_to_host(device::Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset, void* host,
                       std::size_t bytes) override;
  void enqueue_from_host(device::Stream& stream, const void* host, const std::shared_ptr<Buffer>& dst,
                         std::size_t dst_offset, std::size_t bytes, std::shared_ptr<void> host_owner) override;
  void enqueue_within(device::Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                      const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes) override;
  std::shared_ptr<void> staging_buffer(std::size_t bytes) override { return staging_->acquire(bytes); }
  void poison(void* ptr, std::size_t bytes) noexcept override;
  // The buffer and offset of device address `ptr`, in the device memory or the shared memory.
  DeviceSpan find(const void* ptr, std::size_t bytes) const;
  // `stream` (one of this device's) as the OpenClStream it is.
  static OpenClStream& opencl_stream(device::Stream& stream);

  // Immutable after construction.
  const std::shared_ptr<OpenClContext> context_;
  OpenClDeviceMemory& source_;                // owned by memory()
  const OpenClDeviceMemory* shared_source_;   // owned by shared_memory(); null without shared memory
  std::vector<cl_command_queue> queues_;      // one per stream, same index
  cl_command_queue service_queue_ = nullptr;  // poison fills
  // One 4-byte buffer per stream, same index: backend overhead like the queues, never in the memory stack, so a
  // step's tracked memory is exactly its plan.
  std::vector<cl_mem> status_words_;
  const std::shared_ptr<StagingBufferTable> staging_buffers_;  // filled by staging_'s OpenClStagingMemory
  std::shared_ptr<device::StagingPool> staging_;
  // kernels_[i] is touched only by stream i's worker (in launches).
  std::vector<std::map<std::string, cl_kernel, std::less<>>> kernels_;
  std::atomic<std::uint64_t> copies_within_{0};
};

}  // namespace tp::backend::opencl

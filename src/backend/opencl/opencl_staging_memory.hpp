// SPDX-License-Identifier: Apache-2.0
#pragma once
// OpenClStagingMemory: the upstream of an opencl device's StagingPool, host memory the OpenCL driver pins.
//
// allocate() creates a buffer with CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE (the driver allocates host
// memory it can transfer from directly), maps it once for reading and writing (a blocking clEnqueueMapBuffer
// on a queue of this resource's own) and returns the mapped address, aligned up to the request; deallocate()
// unmaps and releases it. A buffer stays mapped all its life, so to every layer above its memory is plain host
// memory, and the copies hand it to clEnqueueReadBuffer / WriteBuffer of device buffers: the transfer vendors
// document as the fast (pinned) path. The staging buffer itself is never named by an enqueued command while
// it is mapped (the specification leaves that undefined); StagingBufferTable keeps it for inspection.
//
// Errors: a refusal for lack of memory (CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES,
// CL_OUT_OF_HOST_MEMORY, or CL_INVALID_BUFFER_SIZE past CL_DEVICE_MAX_MEM_ALLOC_SIZE) is a
// tp::OutOfMemoryError naming the call, the size and the device; any other failure a tp::DeviceError from
// check(). Either way the StagingPool says so and stages through pageable memory from then on.
//
// Stats as PinnedHostResource's: in use and reserved are the rounded bytes handed out, one upstream call per
// allocate/deallocate. Thread-safe.

#include <CL/cl.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>

#include "backend/opencl/opencl_context.hpp"
#include "backend/opencl/opencl_launch.hpp"
#include "tensorpool/memory/memory_resource.hpp"

namespace tp::backend::opencl {

// The live staging buffers of one OpenClStagingMemory, by the host address handed out. Shared between the
// resource (which inserts and erases) and its device (which looks up): the StagingPool's memory stack may
// outlive the device, or be replaced by a pageable one, and a lookup then finds nothing rather than a
// dangling resource. Thread-safe.
class StagingBufferTable {
 public:
  struct Entry {
    cl_mem buffer = nullptr;  // created with CL_MEM_ALLOC_HOST_PTR, mapped for reading and writing
    void* mapped = nullptr;   // what clEnqueueMapBuffer returned: the buffer's byte 0
    std::size_t bytes = 0;    // usable bytes from the address handed out
  };

  void insert(const void* host, const Entry& entry);
  // Removes and returns the entry handed out at `host`; nullopt when there is none.
  std::optional<Entry> erase(const void* host) noexcept;
  // Removes and returns any one entry; nullopt when the table is empty.
  [[nodiscard]] std::optional<Entry> take_any() noexcept;
  // The staging buffer holding host bytes [host, host + bytes) and host's offset in it; nullopt when no live
  // staging buffer holds them all.
  [[nodiscard]] std::optional<DeviceSpan> lookup(const void* host, std::size_t bytes) const;
  [[nodiscard]] std::size_t size() const;

 private:
  mutable std::shared_mutex mutex_;       // guards entries_
  std::map<const char*, Entry> entries_;  // keyed by the address handed out; ranges never overlap
};

class OpenClStagingMemory final : public memory::MemoryResource {
 public:
  // The alignment of the addresses handed out is at most this (BFC asks for 256).
  static constexpr std::size_t kMaxAlignment = 4096;

  // `name` is the resource's (e.g. "opencl:0/staging"); `table` receives the live buffers (a fresh one when
  // null). Throws tp::DeviceError when the driver refuses the mapping queue.
  OpenClStagingMemory(std::shared_ptr<OpenClContext> context, std::string name,
                      std::shared_ptr<StagingBufferTable> table = nullptr);
  // Unmaps and releases the buffers still live (a stack gives its regions back before its source goes).
  ~OpenClStagingMemory() override;

  std::size_t max_alignment() const noexcept override { return kMaxAlignment; }
  std::size_t allocation_granularity() const noexcept override { return memory::kDefaultAlignment; }
  const std::shared_ptr<StagingBufferTable>& table() const noexcept { return table_; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const memory::AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  memory::MemoryStats do_stats() const override;
  void do_reset_peak() override;

  void release(const StagingBufferTable::Entry& entry) const noexcept;
  [[noreturn]] void throw_out_of_memory(std::size_t requested, std::size_t rounded, const memory::AllocationTag& tag,
                                        const std::string& what);

  // Immutable after construction.
  const std::shared_ptr<OpenClContext> context_;
  const std::shared_ptr<StagingBufferTable> table_;
  cl_command_queue queue_ = nullptr;  // maps and unmaps only; command queues are thread-safe
  mutable std::mutex stats_mutex_;    // guards stats_
  memory::MemoryStats stats_;
};

}  // namespace tp::backend::opencl

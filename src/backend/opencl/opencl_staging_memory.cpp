// SPDX-License-Identifier: Apache-2.0
#include "backend/opencl/opencl_staging_memory.hpp"

#include <cstdint>
#include <exception>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::backend::opencl {
void StagingBufferTable::insert(const void* host, const Entry& entry) {
  std::unique_lock lock(mutex_);
  entries_.emplace(static_cast<const char*>(host), entry);
}

std::optional<StagingBufferTable::Entry> StagingBufferTable::erase(const void* host) noexcept {
  std::unique_lock lock(mutex_);
  const auto found = entries_.find(static_cast<const char*>(host));
  if (found == entries_.end()) return std::nullopt;
  const Entry entry = found->second;
  entries_.erase(found);
  return entry;
}

std::optional<StagingBufferTable::Entry> StagingBufferTable::take_any() noexcept {
  std::unique_lock lock(mutex_);
  if (entries_.empty()) return std::nullopt;
  const Entry entry = entries_.begin()->second;
  entries_.erase(entries_.begin());
  return entry;
}

std::optional<DeviceSpan> StagingBufferTable::lookup(const void* host, std::size_t bytes) const {
  const char* const address = static_cast<const char*>(host);
  std::shared_lock lock(mutex_);
  auto found = entries_.upper_bound(address);
  if (found == entries_.begin()) return std::nullopt;
  --found;
  const std::size_t offset = static_cast<std::size_t>(address - found->first);
  if (offset > found->second.bytes || bytes > found->second.bytes - offset) return std::nullopt;
  const char* const mapped = static_cast<const char*>(found->second.mapped);
  return DeviceSpan{found->second.buffer, static_cast<std::size_t>(address - mapped)};
}

std::size_t StagingBufferTable::size() const {
  std::shared_lock lock(mutex_);
  return entries_.size();
}

OpenClStagingMemory::OpenClStagingMemory(std::shared_ptr<OpenClContext> context, std::string name,
                                         std::shared_ptr<StagingBufferTable> table)
    : MemoryResource(std::move(name)),
      context_(std::move(context)),
      table_(table != nullptr ? std::move(table) : std::make_shared<StagingBufferTable>()) {
  if (context_ == nullptr) TP_THROW(InvalidArgument, "opencl", this->name(), ": no OpenCL context given");
  cl_int status = CL_SUCCESS;
  queue_ = clCreateCommandQueueWithProperties(context_->context(), context_->device(), nullptr, &status);
  check(status,
        "clCreateCommandQueueWithProperties(" + this->name() + " mapping queue, " + context_->properties().name + ")");
}

OpenClStagingMemory::~OpenClStagingMemory() {
  while (const std::optional<StagingBufferTable::Entry> entry = table_->take_any()) release(*entry);
  clReleaseCommandQueue(queue_);
}

void OpenClStagingMemory::throw_out_of_memory(std::size_t requested, std::size_t rounded,
                                              const memory::AllocationTag& tag, const std::string& what) {
  OutOfMemoryReport report;
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.num_ooms;
    report = OutOfMemoryReport::for_request(name(), requested, rounded, tag, std::nullopt, stats_.bytes_in_use,
                                            stats_.bytes_reserved);
  }
  report.detail = what;
  throw OutOfMemoryError(std::move(report));
}

void* OpenClStagingMemory::do_allocate(std::size_t bytes, std::size_t alignment, const memory::AllocationTag& tag) {
  const std::size_t rounded = memory::round_up(bytes, memory::kDefaultAlignment);
  // The driver aligns the mapping to CL_DEVICE_MEM_BASE_ADDR_ALIGN at least, not necessarily to `alignment`:
  // room to align inside.
  const std::size_t buffer_bytes = rounded + alignment;
  const std::string device = context_->properties().name;
  const std::size_t largest = context_->properties().max_allocation_bytes;
  if (largest != 0 && buffer_bytes > largest) {
    throw_out_of_memory(bytes, rounded, tag,
                        "one OpenCL buffer holds at most " + format_bytes(largest) + " on " + device +
                            " (CL_DEVICE_MAX_MEM_ALLOC_SIZE); stage smaller copies");
  }
  const std::string call_suffix =
      "(CL_MEM_ALLOC_HOST_PTR, " + format_bytes(buffer_bytes) + ", " + name() + " on " + device + ")";
  cl_int status = CL_SUCCESS;
  cl_mem buffer =
      clCreateBuffer(context_->context(), CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, buffer_bytes, nullptr, &status);
  if (status != CL_SUCCESS) {
    if (is_out_of_memory(status)) {
      throw_out_of_memory(bytes, rounded, tag,
                          "clCreateBuffer" + call_suffix + " failed: " + std::string(error_name(status)) +
                              "; free host memory or stage smaller copies");
    }
    check(status, "clCreateBuffer" + call_suffix);
  }
  void* mapped = clEnqueueMapBuffer(queue_, buffer, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, buffer_bytes, 0, nullptr,
                                    nullptr, &status);
  if (status != CL_SUCCESS || mapped == nullptr) {
    clReleaseMemObject(buffer);
    if (is_out_of_memory(status)) {
      throw_out_of_memory(bytes, rounded, tag,
                          "clEnqueueMapBuffer" + call_suffix + " failed: " + std::string(error_name(status)) +
                              "; free host memory or stage smaller copies");
    }
    check(status == CL_SUCCESS ? CL_MAP_FAILURE : status, "clEnqueueMapBuffer" + call_suffix);
  }
  const auto start = reinterpret_cast<std::uintptr_t>(mapped);
  char* const address = static_cast<char*>(mapped) + (memory::round_up(start, alignment) - start);
  try {
    table_->insert(address, {buffer, mapped, rounded});
  } catch (...) {  // no memory for the table's node
    release({buffer, mapped, rounded});
    throw;
  }
  std::lock_guard lock(stats_mutex_);
  stats_.record_allocation(bytes, rounded, rounded);
  ++stats_.upstream_allocs;
  return address;
}

void OpenClStagingMemory::release(const StagingBufferTable::Entry& entry) const noexcept {
  // Unmapping waits for nothing else: no command names a staging buffer while it is mapped, and the copies
  // through its host memory completed before the block came back (stream-ordered reuse).
  cl_int status = clEnqueueUnmapMemObject(queue_, entry.buffer, entry.mapped, 0, nullptr, nullptr);
  if (status == CL_SUCCESS) status = clFinish(queue_);
  if (status != CL_SUCCESS) {
    TP_LOG(warning, "opencl", name(), ": unmapping a staging buffer failed: ", error_name(status), " (",
           static_cast<int>(status), "); releasing it anyway");
  }
  clReleaseMemObject(entry.buffer);
}

void OpenClStagingMemory::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  const std::optional<StagingBufferTable::Entry> entry = table_->erase(ptr);
  if (!entry) return;  // not ours: the base class contract makes this unreachable
  release(*entry);
  std::lock_guard lock(stats_mutex_);
  stats_.record_free(bytes, entry->bytes, entry->bytes);
  ++stats_.upstream_frees;
}

memory::MemoryStats OpenClStagingMemory::do_stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

void OpenClStagingMemory::do_reset_peak() {
  std::lock_guard lock(stats_mutex_);
  stats_.reset_peaks();
}

}  // namespace tp::backend::opencl

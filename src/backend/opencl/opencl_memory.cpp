// SPDX-License-Identifier: Apache-2.0
#include "backend/opencl/opencl_memory.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::backend::opencl {
OpenClDeviceMemory::OpenClDeviceMemory(std::shared_ptr<OpenClContext> context, std::size_t capacity_bytes,
                                       RegionKind kind, std::string name)
    : MemoryResource(std::move(name)), context_(std::move(context)), capacity_(capacity_bytes), kind_(kind) {
  if (context_ == nullptr) TP_THROW(InvalidArgument, "opencl", this->name(), ": no OpenCL context given");
  if (capacity_ == 0) TP_THROW(InvalidArgument, "opencl", this->name(), ": capacity_bytes = 0; a device needs memory");
  if (kind_ == RegionKind::svm && !context_->properties().svm_coarse_grain_buffer) {
    TP_THROW(InvalidArgument, "opencl", this->name(), ": ", context_->properties().name,
             " has no coarse-grained buffer SVM; use RegionKind::reserved");
  }
  if (kind_ == RegionKind::shared && !context_->properties().svm_fine_grain_buffer) {
    TP_THROW(InvalidArgument, "opencl", this->name(), ": ", context_->properties().name,
             " has no fine-grained buffer SVM, so it has no memory host code and kernels share");
  }
}

OpenClDeviceMemory::~OpenClDeviceMemory() {
  for (const auto& [address, region] : regions_) destroy_region(region);
}

void OpenClDeviceMemory::throw_out_of_memory(std::size_t requested, std::size_t rounded,
                                             const memory::AllocationTag& tag, const std::string& what) {
  const std::size_t used = used_.load(std::memory_order_relaxed);
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.num_ooms;
  }
  auto report = OutOfMemoryReport::for_request(name(), requested, rounded, tag, capacity_, used, used);
  report.largest_free_block = used < capacity_ ? capacity_ - used : 0;
  report.detail = what;
  throw OutOfMemoryError(std::move(report));
}

OpenClDeviceMemory::Region OpenClDeviceMemory::create_region(std::size_t rounded, std::size_t alignment,
                                                             std::size_t requested, const memory::AllocationTag& tag) {
  Region region;
  region.bytes = rounded;
  cl_int status = CL_SUCCESS;
  if (kind_ == RegionKind::svm || kind_ == RegionKind::shared) {
    // clSVMAlloc aligns to at most the device's largest data type (PoCL refuses larger alignments): ask for
    // `alignment` more and align inside.
    region.base_bytes = rounded + alignment;
    const cl_svm_mem_flags flags =
        CL_MEM_READ_WRITE | (kind_ == RegionKind::shared ? CL_MEM_SVM_FINE_GRAIN_BUFFER : cl_svm_mem_flags{0});
    region.base = clSVMAlloc(context_->context(), flags, region.base_bytes, 0);
    if (region.base == nullptr) {
      throw_out_of_memory(requested, rounded, tag,
                          "clSVMAlloc of " + format_bytes(region.base_bytes) + " on " + context_->properties().name +
                              " returned null (driver out of memory)");
    }
    region.buffer = clCreateBuffer(context_->context(), CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, region.base_bytes,
                                   region.base, &status);
  } else {
    region.base_bytes = rounded + alignment;
    region.base = mmap(nullptr, region.base_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region.base == MAP_FAILED) {
      throw_out_of_memory(
          requested, rounded, tag,
          "reserving " + format_bytes(region.base_bytes) + " of host address space for device addresses failed");
    }
    region.buffer = clCreateBuffer(context_->context(), CL_MEM_READ_WRITE, region.base_bytes, nullptr, &status);
  }
  if (status != CL_SUCCESS) {
    region.buffer = nullptr;
    destroy_region(region);
    if (is_out_of_memory(status)) {
      throw_out_of_memory(requested, rounded, tag,
                          "clCreateBuffer of " + format_bytes(region.base_bytes) + " on " +
                              context_->properties().name + " failed: " + std::string(error_name(status)));
    }
    check(status, "clCreateBuffer");
  }
  return region;
}

void OpenClDeviceMemory::destroy_region(const Region& region) const noexcept {
  if (region.buffer != nullptr) clReleaseMemObject(region.buffer);
  if (region.base == nullptr) return;
  // Every command on the region has completed: buffers come back in stream order, after their work.
  if (kind_ != RegionKind::reserved) {
    clSVMFree(context_->context(), region.base);
  } else {
    munmap(region.base, region.base_bytes);
  }
}

void* OpenClDeviceMemory::do_allocate(std::size_t bytes, std::size_t alignment, const memory::AllocationTag& tag) {
  const std::size_t rounded = memory::round_up(bytes, memory::kDefaultAlignment);
  const std::size_t largest = context_->properties().max_allocation_bytes;
  if (largest != 0 && rounded + alignment > largest) {
    throw_out_of_memory(bytes, rounded, tag,
                        "one OpenCL buffer holds at most " + format_bytes(largest) + " on " +
                            context_->properties().name + " (CL_DEVICE_MAX_MEM_ALLOC_SIZE)");
  }
  std::size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (used > capacity_ || rounded > capacity_ - used) {
      throw_out_of_memory(bytes, rounded, tag,
                          name() + ": the device's capacity of " + format_bytes(capacity_) + " is a hard wall (" +
                              format_bytes(used) + " used)");
    }
  } while (!used_.compare_exchange_weak(used, used + rounded, std::memory_order_relaxed));
  Region region;
  try {
    region = create_region(rounded, alignment, bytes, tag);
  } catch (...) {
    used_.fetch_sub(rounded, std::memory_order_relaxed);
    throw;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(region.base);
  char* const address = static_cast<char*>(region.base) + (memory::round_up(base, alignment) - base);
  {
    std::unique_lock lock(regions_mutex_);
    regions_.emplace(address, region);
  }
  std::lock_guard lock(stats_mutex_);
  stats_.record_allocation(bytes, rounded, rounded);
  ++stats_.upstream_allocs;
  return address;
}

void OpenClDeviceMemory::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  Region region;
  {
    std::unique_lock lock(regions_mutex_);
    const auto found = regions_.find(static_cast<const char*>(ptr));
    if (found == regions_.end()) return;  // not ours: the base class contract makes this unreachable
    region = found->second;
    regions_.erase(found);
  }
  destroy_region(region);
  used_.fetch_sub(region.bytes, std::memory_order_relaxed);
  std::lock_guard lock(stats_mutex_);
  stats_.record_free(bytes, region.bytes, region.bytes);
  ++stats_.upstream_frees;
}

std::optional<DeviceSpan> OpenClDeviceMemory::lookup(const void* ptr, std::size_t bytes) const {
  const char* const address = static_cast<const char*>(ptr);
  std::shared_lock lock(regions_mutex_);
  auto found = regions_.upper_bound(address);
  if (found != regions_.begin()) {
    --found;
    const std::size_t offset = static_cast<std::size_t>(address - found->first);
    if (offset <= found->second.bytes && bytes <= found->second.bytes - offset) {
      const auto base = static_cast<const char*>(found->second.base);
      return DeviceSpan{found->second.buffer, static_cast<std::size_t>(address - base)};
    }
  }
  return std::nullopt;
}

DeviceSpan OpenClDeviceMemory::find(const void* ptr, std::size_t bytes) const {
  if (const std::optional<DeviceSpan> span = lookup(ptr, bytes)) return *span;
  TP_THROW(DeviceError, "opencl", name(), ": no live buffer holds device address ", ptr, " (", bytes,
           " bytes); the memory was freed, or belongs to another device");
}

memory::MemoryStats OpenClDeviceMemory::do_stats() const {
  memory::MemoryStats stats;
  {
    std::lock_guard lock(stats_mutex_);
    stats = stats_;
  }
  const std::size_t used = used_.load(std::memory_order_relaxed);
  stats.largest_free_block = used < capacity_ ? capacity_ - used : 0;
  stats.bytes_limit = capacity_;
  return stats;
}

void OpenClDeviceMemory::do_reset_peak() {
  std::lock_guard lock(stats_mutex_);
  stats_.reset_peaks();
}

}  // namespace tp::backend::opencl

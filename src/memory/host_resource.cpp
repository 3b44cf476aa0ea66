// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/host_resource.hpp"

#include <algorithm>
#include <cstdlib>

#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {

HostResource::HostResource(std::string name) : MemoryResource(std::move(name)) {}

void* HostResource::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  void* ptr = nullptr;
  const std::size_t effective = std::max(alignment, sizeof(void*));
  if (posix_memalign(&ptr, effective, bytes) != 0 || ptr == nullptr) {
    OutOfMemoryReport report;
    {
      std::lock_guard lock(mutex_);
      ++stats_.num_ooms;
      report = OutOfMemoryReport::for_request(name(), bytes, bytes, tag, std::nullopt, stats_.bytes_in_use,
                                              stats_.bytes_reserved);
    }
    report.detail = "posix_memalign refused the request (host memory exhausted)";
    throw OutOfMemoryError(std::move(report));
  }
  std::lock_guard lock(mutex_);
  stats_.record_allocation(bytes, bytes, bytes);
  ++stats_.upstream_allocs;
  return ptr;
}

void HostResource::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  std::free(ptr);
  std::lock_guard lock(mutex_);
  stats_.record_free(bytes, bytes, bytes);
  ++stats_.upstream_frees;
}

MemoryStats HostResource::do_stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void HostResource::do_reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
}

}  // namespace tp::memory

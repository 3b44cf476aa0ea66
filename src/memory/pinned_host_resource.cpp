// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/pinned_host_resource.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

std::optional<std::size_t> current_memlock_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<std::size_t>(limit.rlim_cur);
}

}  // namespace

PinnedHostResource::PinnedHostResource(std::string name)
    : MemoryResource(std::move(name)), page_size_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {}

std::size_t PinnedHostResource::max_alignment() const noexcept { return page_size_; }

std::string PinnedHostResource::describe_lock_failure(const std::string& resource_name, int error_number,
                                                      std::size_t requested_bytes, std::size_t mapped_bytes,
                                                      std::optional<std::size_t> memlock_limit) {
  std::ostringstream text;
  text << resource_name << ": mlock of " << format_bytes(mapped_bytes) << " (" << requested_bytes
       << " bytes requested) failed: " << std::strerror(error_number) << " (errno " << error_number
       << "). RLIMIT_MEMLOCK is "
       << (memlock_limit ? format_bytes(*memlock_limit) + " (" + std::to_string(*memlock_limit) + " bytes)"
                         : std::string("unlimited"))
       << ". Fix: raise the locked-memory limit (`ulimit -l unlimited`, or memlock in"
       << " /etc/security/limits.conf, or --ulimit memlock=-1 for containers), or run as root / with"
       << " CAP_IPC_LOCK; or use fewer or smaller pinned staging buffers.";
  return text.str();
}

void* PinnedHostResource::do_allocate(std::size_t bytes, std::size_t /*alignment*/, const AllocationTag& tag) {
  const std::size_t mapped = round_up(bytes, page_size_);
  void* ptr = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ptr == MAP_FAILED) {
    const int error_number = errno;
    OutOfMemoryReport report;
    {
      std::lock_guard lock(mutex_);
      ++stats_.num_ooms;
      report = OutOfMemoryReport::for_request(name(), bytes, mapped, tag, std::nullopt, stats_.bytes_in_use,
                                              stats_.bytes_reserved);
    }
    report.detail = std::string("mmap failed: ") + std::strerror(error_number);
    throw OutOfMemoryError(std::move(report));
  }
  if (mlock(ptr, mapped) != 0) {
    const int error_number = errno;
    munmap(ptr, mapped);
    TP_THROW(DeviceError, "memory",
             describe_lock_failure(name(), error_number, bytes, mapped, current_memlock_limit()));
  }
  std::lock_guard lock(mutex_);
  stats_.record_allocation(bytes, mapped, mapped);
  ++stats_.upstream_allocs;
  return ptr;
}

void PinnedHostResource::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  const std::size_t mapped = round_up(bytes, page_size_);
  munlock(ptr, mapped);
  munmap(ptr, mapped);
  std::lock_guard lock(mutex_);
  stats_.record_free(bytes, mapped, mapped);
  ++stats_.upstream_frees;
}

MemoryStats PinnedHostResource::do_stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void PinnedHostResource::do_reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
}

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/sim_device_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "memory/atomic_max.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {

SimDeviceMemory::SimDeviceMemory(std::size_t capacity_bytes, std::string name)
    : MemoryResource(std::move(name)),
      capacity_(capacity_bytes),
      page_size_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))),
      pages_(std::nullopt, kGranularity, MemoryResource::name()) {
  if (capacity_bytes == 0) {
    TP_THROW(InvalidArgument, "memory", MemoryResource::name(), ": capacity_bytes = 0; a device needs memory");
  }
}

std::size_t SimDeviceMemory::available_bytes() const noexcept {
  const std::size_t used = used_.load(std::memory_order_relaxed);
  return used < capacity_ ? capacity_ - used : 0;
}

bool SimDeviceMemory::take(std::size_t bytes) noexcept {
  std::size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (used > capacity_ || bytes > capacity_ - used) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

void SimDeviceMemory::raise_peak() noexcept { detail::raise_to(peak_used_, used_.load(std::memory_order_relaxed)); }

void SimDeviceMemory::give_back(std::size_t bytes) noexcept { used_.fetch_sub(bytes, std::memory_order_relaxed); }

void SimDeviceMemory::throw_out_of_memory(std::size_t requested, std::size_t rounded, const AllocationTag& tag,
                                          const std::string& what) {
  const std::size_t used = used_.load(std::memory_order_relaxed);
  {
    std::lock_guard lock(mutex_);
    ++stats_.num_ooms;
  }
  auto report = OutOfMemoryReport::for_request(MemoryResource::name(), requested, rounded, tag, capacity_, used, used);
  report.largest_free_block = available_bytes();
  report.detail = what;
  throw OutOfMemoryError(std::move(report));
}

void* SimDeviceMemory::do_allocate(std::size_t bytes, std::size_t /*alignment*/, const AllocationTag& tag) {
  const std::size_t mapped = round_up(bytes, page_size_);
  if (!take(mapped)) {
    throw_out_of_memory(bytes, mapped, tag,
                        MemoryResource::name() + ": the simulated device's capacity of " + format_bytes(capacity_) +
                            " is a hard wall (" + format_bytes(used_bytes()) + " used)");
  }
  void* ptr = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ptr == MAP_FAILED) {
    const int error_number = errno;
    give_back(mapped);
    throw_out_of_memory(bytes, mapped, tag, std::string("mmap failed: ") + std::strerror(error_number));
  }
  raise_peak();  // only once the memory exists: a refused mmap leaves the peak alone
  std::lock_guard lock(mutex_);
  stats_.record_allocation(bytes, mapped, 0);  // reserved bytes are used_, shared with committed pages
  ++stats_.upstream_allocs;
  return ptr;
}

void SimDeviceMemory::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  const std::size_t mapped = round_up(bytes, page_size_);
  munmap(ptr, mapped);
  give_back(mapped);
  std::lock_guard lock(mutex_);
  stats_.record_free(bytes, mapped, 0);
  ++stats_.upstream_frees;
}

MemoryStats SimDeviceMemory::do_stats() const {
  MemoryStats stats;
  {
    std::lock_guard lock(mutex_);
    stats = stats_;
  }
  stats.bytes_reserved = used_bytes();
  stats.peak_bytes_reserved = peak_used_.load(std::memory_order_relaxed);
  stats.largest_free_block = available_bytes();
  stats.bytes_limit = capacity_;
  return stats;
}

void SimDeviceMemory::do_reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
  peak_used_.store(used_bytes(), std::memory_order_relaxed);
}

void* SimDeviceMemory::reserve(std::size_t bytes) { return pages_.reserve(bytes); }

void SimDeviceMemory::unreserve(void* base, std::size_t bytes) noexcept { pages_.unreserve(base, bytes); }

void SimDeviceMemory::commit(void* ptr, std::size_t bytes) {
  if (!take(bytes)) {
    throw_out_of_memory(bytes, bytes, {},
                        MemoryResource::name() + ": committing " + format_bytes(bytes) +
                            " would exceed the simulated device's capacity of " + format_bytes(capacity_) + " (" +
                            format_bytes(used_bytes()) + " used)");
  }
  try {
    pages_.commit(ptr, bytes);
  } catch (...) {
    give_back(bytes);
    throw;
  }
  committed_.fetch_add(bytes, std::memory_order_relaxed);
  raise_peak();
}

VirtualMemory::PhysicalHandle SimDeviceMemory::create_physical() {
  if (!take(kGranularity)) {
    throw_out_of_memory(kGranularity, kGranularity, {},
                        MemoryResource::name() + ": a physical granule of " + format_bytes(kGranularity) +
                            " would exceed the simulated device's capacity of " + format_bytes(capacity_) + " (" +
                            format_bytes(used_bytes()) + " used)");
  }
  PhysicalHandle handle = 0;
  try {
    handle = pages_.create_physical();
  } catch (...) {
    give_back(kGranularity);
    throw;
  }
  committed_.fetch_add(kGranularity, std::memory_order_relaxed);
  raise_peak();
  return handle;
}

void SimDeviceMemory::release_physical(PhysicalHandle handle) noexcept {
  pages_.release_physical(handle);
  committed_.fetch_sub(kGranularity, std::memory_order_relaxed);
  give_back(kGranularity);
}

void SimDeviceMemory::decommit(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr || bytes == 0) return;
  pages_.decommit(ptr, bytes);
  committed_.fetch_sub(bytes, std::memory_order_relaxed);
  give_back(bytes);
}

}  // namespace tp::memory

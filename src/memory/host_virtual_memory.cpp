// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/host_virtual_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "memory/atomic_max.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

void check_granule_range(const std::string& name, std::size_t granularity, const void* ptr, std::size_t bytes,
                         const char* what) {
  if (bytes == 0 || bytes % granularity != 0 || reinterpret_cast<std::uintptr_t>(ptr) % granularity != 0) {
    TP_THROW(InvalidArgument, "memory", name, ": ", what, "(", ptr, ", ", bytes,
             ") is not a non-empty range of whole granules of ", granularity, " bytes");
  }
}

}  // namespace

HostVirtualMemory::HostVirtualMemory(std::optional<std::size_t> capacity, std::size_t granularity, std::string name)
    : capacity_(capacity), granularity_(granularity), name_(std::move(name)) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (!is_power_of_two(granularity_) || granularity_ % page != 0) {
    TP_THROW(InvalidArgument, "memory", name_, ": granularity = ", granularity_,
             " must be a power of two and a multiple of the page size (", page, ")");
  }
  memfd_ = memfd_create("tensorpool-physical", MFD_CLOEXEC);
  if (memfd_ < 0) {
    const int error_number = errno;
    TP_THROW(DeviceError, "memory", name_,
             ": memfd_create for the physical granules failed: ", std::strerror(error_number),
             "; raise the open-file limit (`ulimit -n`) or check that /dev/shm works");
  }
}

HostVirtualMemory::~HostVirtualMemory() { close(memfd_); }

void* HostVirtualMemory::reserve(std::size_t bytes) {
  if (bytes == 0 || bytes % granularity_ != 0 || bytes > kMaxAllocationBytes) {
    TP_THROW(InvalidArgument, "memory", name_, ": reserve(", bytes, ") must be a positive multiple of the ",
             format_bytes(granularity_), " granularity");
  }
  // Over-reserve by one granule and trim both ends so the base is granule aligned.
  const std::size_t padded = bytes + granularity_;
  void* raw = mmap(nullptr, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) {
    const int error_number = errno;
    TP_THROW(DeviceError, "memory", name_, ": reserving ", format_bytes(bytes),
             " of address space failed: ", std::strerror(error_number),
             "; reserve less (ArenaOptions::reserve_bytes) or raise `ulimit -v`");
  }
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + granularity_ - 1) & ~(static_cast<std::uintptr_t>(granularity_) - 1);
  const std::size_t head = aligned - start;
  const std::size_t tail = padded - head - bytes;
  // The aligned base as an offset from raw, keeping the pointer's provenance (no integer-to-pointer cast).
  char* const base = static_cast<char*>(raw) + head;
  if (head != 0) munmap(raw, head);
  if (tail != 0) munmap(base + bytes, tail);
  return base;
}

void HostVirtualMemory::unreserve(void* base, std::size_t bytes) noexcept {
  if (base != nullptr && bytes != 0) munmap(base, bytes);
}

void HostVirtualMemory::take(std::size_t bytes) {
  std::size_t committed = committed_.load(std::memory_order_relaxed);
  while (true) {
    if (capacity_ && (committed > *capacity_ || bytes > *capacity_ - committed)) {
      auto report = OutOfMemoryReport::for_request(name_, bytes, bytes, {}, capacity_, committed, committed);
      report.largest_free_block = committed < *capacity_ ? *capacity_ - committed : 0;
      report.detail = name_ + ": committing " + format_bytes(bytes) + " would exceed the capacity of " +
                      format_bytes(*capacity_) + " (" + format_bytes(committed) + " committed)";
      throw OutOfMemoryError(std::move(report));
    }
    if (committed_.compare_exchange_weak(committed, committed + bytes, std::memory_order_relaxed)) return;
  }
}

void HostVirtualMemory::refuse(std::size_t bytes, std::size_t taken, const std::string& detail) {
  committed_.fetch_sub(taken, std::memory_order_relaxed);
  const std::size_t now = committed_.load(std::memory_order_relaxed);
  auto report = OutOfMemoryReport::for_request(name_, bytes, bytes, {}, capacity_, now, now);
  report.detail = name_ + ": " + detail;
  throw OutOfMemoryError(std::move(report));
}

void HostVirtualMemory::raise_peak(std::size_t now) noexcept { detail::raise_to(peak_committed_, now); }

void HostVirtualMemory::commit(void* ptr, std::size_t bytes) {
  check_granule_range(name_, granularity_, ptr, bytes, "commit");
  take(bytes);
  if (mprotect(ptr, bytes, PROT_READ | PROT_WRITE) != 0) {
    const int error_number = errno;
    refuse(bytes, bytes,
           "the OS refused to commit " + format_bytes(bytes) + " (mprotect: " + std::strerror(error_number) +
               "); check vm.max_map_count and the memory available");
  }
  raise_peak(committed_.load(std::memory_order_relaxed));
}

void HostVirtualMemory::decommit(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr || bytes == 0) return;
  madvise(ptr, bytes, MADV_DONTNEED);
  mprotect(ptr, bytes, PROT_NONE);
  committed_.fetch_sub(bytes, std::memory_order_relaxed);
}

VirtualMemory::PhysicalHandle HostVirtualMemory::create_physical() {
  take(granularity_);
  std::lock_guard lock(slices_mutex_);
  try {
    if (free_slices_.capacity() <= next_slice_) free_slices_.reserve(2 * next_slice_ + 1);
  } catch (...) {
    committed_.fetch_sub(granularity_, std::memory_order_relaxed);
    throw;
  }
  PhysicalHandle handle = next_slice_;
  if (!free_slices_.empty()) {
    handle = free_slices_.back();
    free_slices_.pop_back();
  } else {
    if ((handle + 1) * granularity_ > file_bytes_) {
      // Double the file (sparse: only touched pages cost memory) so growth is amortised.
      const std::size_t grown = std::max((handle + 1) * granularity_, 2 * file_bytes_);
      if (ftruncate(memfd_, static_cast<off_t>(grown)) != 0) {
        const int error_number = errno;
        refuse(granularity_, granularity_,
               "growing the physical granules' memfd to " + format_bytes(grown) +
                   " failed (ftruncate: " + std::strerror(error_number) + ")");
      }
      file_bytes_ = grown;
    }
    ++next_slice_;
  }
  raise_peak(committed_.load(std::memory_order_relaxed));
  return handle;
}

void HostVirtualMemory::release_physical(PhysicalHandle handle) noexcept {
  fallocate(memfd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(handle * granularity_),
            static_cast<off_t>(granularity_));
  {
    std::lock_guard lock(slices_mutex_);
    free_slices_.push_back(handle);  // never allocates: capacity >= slices issued
  }
  committed_.fetch_sub(granularity_, std::memory_order_relaxed);
}

void HostVirtualMemory::map(void* ptr, PhysicalHandle handle) {
  check_granule_range(name_, granularity_, ptr, granularity_, "map");
  if (mmap(ptr, granularity_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd_,
           static_cast<off_t>(handle * granularity_)) == MAP_FAILED) {
    const int error_number = errno;
    refuse(granularity_, 0,
           std::string("the OS refused to map a physical granule (mmap: ") + std::strerror(error_number) +
               "); check vm.max_map_count and the memory available");
  }
}

void HostVirtualMemory::unmap(void* ptr) noexcept {
  // A fresh reservation over the granule replaces the mapping; the range stays ours (no munmap hole). Should
  // the kernel refuse (no memory for the mapping), the granule stays mapped: the caller never touches it,
  // and release_physical punches its pages out of the memfd all the same.
  (void)mmap(ptr, granularity_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

std::size_t HostVirtualMemory::physical_resident_bytes() const {
  struct stat status {};
  if (fstat(memfd_, &status) != 0) {
    const int error_number = errno;
    TP_THROW(DeviceError, "memory", name_,
             ": fstat of the physical granules' memfd failed: ", std::strerror(error_number));
  }
  return static_cast<std::size_t>(status.st_blocks) * 512;
}

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Counters every memory stack reports. Each layer fills what it owns and takes the rest from its upstream:
// allocators own reserved/free-block/upstream counters, the StatisticsAdaptor owns in-use/requested/allocs.

#include <cstddef>
#include <cstdint>
#include <optional>

#include "tensorpool/memory/fragmentation.hpp"

namespace tp::memory {

struct MemoryStats {
  std::size_t bytes_in_use = 0;  // handed out to callers, after rounding
  std::size_t peak_bytes_in_use = 0;
  std::size_t bytes_reserved = 0;  // obtained from the source (regions, committed pages)
  std::size_t peak_bytes_reserved = 0;
  std::size_t bytes_requested = 0;  // currently outstanding, as asked by callers (before rounding)
  std::size_t peak_bytes_requested = 0;
  std::uint64_t num_allocs = 0;  // successful allocations since creation
  std::uint64_t num_frees = 0;
  std::size_t largest_alloc = 0;       // largest single request served
  std::size_t largest_free_block = 0;  // largest contiguous piece of free_bytes() (fragmentation.hpp)
  std::uint64_t num_ooms = 0;          // requests that ended in OutOfMemoryError
  std::uint64_t num_retries = 0;       // requests served only after freeing caches / garbage collection
  std::uint64_t upstream_allocs = 0;   // calls into the source (regions, page commits)
  std::uint64_t upstream_frees = 0;
  // Compactions that moved live blocks (MemoryResource::compact, compaction before growth: the expandable arena
  // alone moves blocks), and the bytes their moves copied or remapped.
  std::uint64_t num_compactions = 0;
  std::size_t bytes_compacted = 0;
  std::optional<std::size_t> bytes_limit;  // hard wall of this stack, if any

  // Bookkeeping shared by every resource (callers hold the resource's lock):
  // one allocation served: `requested` as asked, adding `in_use` bytes (after rounding) and `reserved` bytes
  // newly obtained from the source (0 when served from a cache).
  void record_allocation(std::size_t requested, std::size_t in_use, std::size_t reserved) noexcept {
    bytes_requested += requested;
    bytes_in_use += in_use;
    bytes_reserved += reserved;
    largest_alloc = requested > largest_alloc ? requested : largest_alloc;
    ++num_allocs;
    update_peaks();
  }
  // The inverse of record_allocation; never wraps below zero.
  void record_free(std::size_t requested, std::size_t in_use, std::size_t reserved) noexcept {
    bytes_requested -= requested < bytes_requested ? requested : bytes_requested;
    bytes_in_use -= in_use < bytes_in_use ? in_use : bytes_in_use;
    bytes_reserved -= reserved < bytes_reserved ? reserved : bytes_reserved;
    ++num_frees;
  }
  // Raises each peak to its current value.
  void update_peaks() noexcept {
    if (bytes_in_use > peak_bytes_in_use) peak_bytes_in_use = bytes_in_use;
    if (bytes_reserved > peak_bytes_reserved) peak_bytes_reserved = bytes_reserved;
    if (bytes_requested > peak_bytes_requested) peak_bytes_requested = bytes_requested;
  }
  // Peaks restart from the current values (reset_peak()).
  void reset_peaks() noexcept {
    peak_bytes_in_use = bytes_in_use;
    peak_bytes_reserved = bytes_reserved;
    peak_bytes_requested = bytes_requested;
  }

  // Reserved but not in use.
  [[nodiscard]] std::size_t free_bytes() const noexcept {
    return bytes_reserved > bytes_in_use ? bytes_reserved - bytes_in_use : 0;
  }
  // External fragmentation and the bytes lost to rounding, as fragmentation.hpp defines them.
  [[nodiscard]] Fragmentation fragmentation_detail() const noexcept {
    return measure_fragmentation(bytes_reserved, bytes_in_use, largest_free_block, bytes_requested);
  }
  // 1 - largest_free_block / free_bytes(), 0..1: 0 when the free memory is one block (or there is none).
  [[nodiscard]] double fragmentation() const noexcept { return fragmentation_detail().external; }
  // bytes_in_use - bytes_requested: internal fragmentation, in bytes.
  [[nodiscard]] std::size_t internal_fragmentation_bytes() const noexcept {
    return fragmentation_detail().internal_bytes.value_or(0);
  }
};

}  // namespace tp::memory

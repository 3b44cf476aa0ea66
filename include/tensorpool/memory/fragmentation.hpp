// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fragmentation, defined once. Every figure that shows it (MemoryStats, the memory summary after training,
// the profiler's table and snapshot, the out-of-memory report, tensorpool.memory and tensorpool.errors) calls
// measure_fragmentation() and, for text, describe().
//
//   free bytes = reserved - in use: the free memory the allocator holds (regions, committed pages). Memory
//                not reserved yet is not counted: to a growing allocator it is one block.
//   external   = 1 - largest free block / free bytes, 0..1; 0 when nothing is free. It is the share of the
//                free memory that one request cannot use: 0 when the free memory is one block, near 1 when
//                it is shattered into slivers. It is never 1 while anything is free, since the largest
//                piece of a nonzero free total is nonzero.
//   internal   = in use - requested, in bytes: what rounding adds to what callers asked for (alignment,
//                size classes, granules, a chunk kept whole because splitting it was not worth it).
//
// largest_free_block is the allocator's largest contiguous piece of those free bytes (BFC: its largest free
// chunk; the expandable arena: its longest run of committed bytes no in-use block covers; a layer that
// holds no free memory: 0). A value above the free bytes (a layer reporting what its source could still
// give) is read as the free bytes, so the ratio stays within 0..1.

#include <cstddef>
#include <optional>
#include <string>

namespace tp::memory {

struct Fragmentation {
  std::size_t free_bytes = 0;                 // reserved - in use
  std::size_t largest_free_block = 0;         // <= free_bytes
  double external = 0.0;                      // 1 - largest_free_block / free_bytes; 0 when free_bytes == 0
  std::optional<std::size_t> internal_bytes;  // in use - requested; unset when `requested` was not known
};

// The definition above. `requested` is the outstanding bytes as callers asked for them (before rounding).
[[nodiscard]] constexpr Fragmentation measure_fragmentation(std::size_t reserved, std::size_t in_use,
                                                            std::size_t largest_free_block,
                                                            std::optional<std::size_t> requested) noexcept {
  Fragmentation result;
  result.free_bytes = reserved > in_use ? reserved - in_use : 0;
  result.largest_free_block = largest_free_block < result.free_bytes ? largest_free_block : result.free_bytes;
  if (result.free_bytes > 0) {
    result.external = 1.0 - static_cast<double>(result.largest_free_block) / static_cast<double>(result.free_bytes);
  }
  if (requested.has_value()) result.internal_bytes = in_use > *requested ? in_use - *requested : 0;
  return result;
}

// "fragmentation 62.4% external (largest free block 14.47 MiB of 38.47 MiB reserved and free), 1.20 MiB
// internal (rounding)"; "(nothing reserved is free)" when free_bytes is 0; the internal part only when known.
[[nodiscard]] std::string describe(const Fragmentation& fragmentation);

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Compaction: moving live blocks so that the memory their holes pin can serve a request that fragmentation
// blocks (ExpandableArena::compact, docs/memory.md "Compaction"). The allocator cannot know who holds a
// pointer; the Relocator is the owner's side: it says which blocks may move and is told where each went.

#include <cstddef>

namespace tp::memory {

// The owner of the blocks a compaction may move. Both calls come with the allocator's lock held, at a point
// the owner chose (compact() is only ever called by it, e.g. at a step boundary): they must not call into
// the allocator, and nothing may use the blocks while compact() runs.
class Relocator {
 public:
  virtual ~Relocator() = default;
  // Whether the block at `ptr` (allocated with `bytes`) may move now. A block whose owner cannot update every
  // pointer to it must answer false: it is never moved.
  [[nodiscard]] virtual bool can_move(const void* ptr, std::size_t bytes) = 0;
  // The block's contents now live at `to`; `from` is no longer a block of this owner. Update every pointer
  // (deallocate `to` with the same `bytes` later).
  virtual void relocated(void* from, void* to, std::size_t bytes) noexcept = 0;
};

// What one compaction did.
struct CompactionResult {
  bool ran = false;                  // false when the allocator cannot compact (e.g. shared granules)
  std::size_t blocks_moved = 0;      // blocks now at a lower address
  std::size_t bytes_copied = 0;      // moved by copying (VirtualMemory::copy)
  std::size_t bytes_remapped = 0;    // whole granules mapped at the new place instead of copied
  std::size_t granules_freed = 0;    // physical granules no in-use block used any more, given back
  std::size_t committed_before = 0;  // committed bytes when it started
  std::size_t committed_after = 0;   // and when it ended (cached granules are given back too)
  std::size_t granularity = 0;       // bytes per granule
};

}  // namespace tp::memory

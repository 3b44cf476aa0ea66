// SPDX-License-Identifier: Apache-2.0
// ExpandableArena: compaction (the header's "Compaction"). Without granule sharing each physical granule has
// at most one mapping whose virtual granule has users, so writing through a virtual granule with users, or
// through one whose physical granule has no users at all, touches no other block's bytes: the only writes
// compaction makes.
#include <algorithm>
#include <new>
#include <vector>

#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {

// A granule of the new place is remapped, not copied, when the block keeps its offset within a granule and
// the granule lies wholly inside the new place: then it lies wholly inside the old one too, whose granule
// only this block uses.
bool ExpandableArena::remaps(std::size_t block_offset, std::size_t offset, std::size_t size,
                             std::size_t granule) const noexcept {
  const std::size_t start = granule * granularity_;
  return (block_offset - offset) % granularity_ == 0 && start >= offset && start + granularity_ <= offset + size;
}

ExpandableArena::MoveCost ExpandableArena::move_cost(std::uint32_t block, std::size_t offset) const noexcept {
  const Block& moving = nodes_[block];
  const std::size_t size = moving.size;
  const std::size_t first = first_granule(offset);
  const std::size_t end = end_granule(offset, size);
  MoveCost cost;
  for (std::size_t granule = first; granule < end; ++granule) {
    if (remaps(moving.offset, offset, size, granule)) continue;
    const Granule& entry = granules_[granule];
    if (entry.users != 0) continue;  // kept: its physical granule is in use already
    ++cost.fresh;                    // a cached one (mapped here or not) or a new one
  }
  // The old granules only this block uses are given back, unless the new place touches them too; remapped
  // ones move with it.
  const std::size_t old_first = first_granule(moving.offset);
  const std::size_t old_end = end_granule(moving.offset, size);
  const std::size_t shift = moving.offset - offset;
  for (std::size_t granule = old_first; granule < old_end; ++granule) {
    if (granules_[granule].users != 1 || (granule >= first && granule < end)) continue;
    const std::size_t destination = granule - shift / granularity_;
    if (shift % granularity_ == 0 && remaps(moving.offset, offset, size, destination)) continue;
    ++cost.freed;
  }
  return cost;
}

ExpandableArena::Move ExpandableArena::find_move(std::uint32_t block) const {
  const Block& moving = nodes_[block];
  const std::size_t size = moving.size;
  const std::size_t limit_granules = options_.limit_bytes / granularity_;
  const std::size_t available =
      cached_count_ + (limit_granules > committed_granules_ ? limit_granules - committed_granules_ : 0);
  for (std::uint32_t index = first_block_; index != block; index = nodes_[index].next) {
    const Block& hole = nodes_[index];
    if (hole.in_use || hole.size < size) continue;
    const std::size_t hole_end = hole.offset + hole.size;
    // The same offset within a granule first (whole granules are remapped), then either end of the hole.
    std::size_t candidates[3] = {hole.offset + (moving.offset - hole.offset) % granularity_, hole.offset,
                                 hole_end - size};
    for (const std::size_t offset : candidates) {
      if (offset + size > hole_end) continue;
      const MoveCost cost = move_cost(block, offset);
      if (cost.fresh <= cost.freed && cost.fresh <= available) return Move{index, offset, true};
    }
  }
  return Move{};
}

bool ExpandableArena::move_block(std::uint32_t block, const Move& move, CompactionResult& result) {
  const std::size_t size = nodes_[block].size;
  const std::size_t from = nodes_[block].offset;
  const std::size_t to = move.offset;
  const std::size_t shift = from - to;
  const std::size_t first = first_granule(to);
  const std::size_t end = end_granule(to, size);
  const std::size_t limit_granules = options_.limit_bytes / granularity_;
  // Everything that may allocate, before the first change.
  prepare_carve(Placement{move.hole, to, 0, 0, true}, size);
  move_scratch_.clear();
  move_scratch_.reserve(end - first);

  // 1. Take the granules of the new place that are not remapped: kept (with users), claimed (cached here),
  //    or a fresh physical granule (the newest cached one, or a new one within the limit).
  const auto undo_taken = [&]() noexcept {
    for (const std::size_t granule : move_scratch_) drop_piece(granule, 0);
    move_scratch_.clear();
    stats_.bytes_reserved = committed_granules_ * granularity_;
  };
  for (std::size_t granule = first; granule < end; ++granule) {
    if (remaps(from, to, size, granule)) continue;
    const Granule& entry = granules_[granule];
    const bool keep = entry.users != 0 || (entry.physical != kNone && physicals_[entry.physical].users == 0);
    if (!keep) {
      std::uint32_t physical = lru_newest_;
      try {
        if (physical == kNone) {
          if (committed_granules_ >= limit_granules) {
            undo_taken();
            return false;
          }
          physical = new_physical();  // cached until take_piece
        }
        map_granule(granule, physical);
      } catch (const OutOfMemoryError&) {
        undo_taken();
        return false;
      }
    }
    take_piece(granule, 0);
    move_scratch_.push_back(granule);
  }

  // 2. Copy what is not remapped, granule by granule (the old and new places do not overlap: the new one
  //    lies in a free block).
  for (std::size_t granule = first; granule < end; ++granule) {
    if (remaps(from, to, size, granule)) continue;
    const std::size_t low = std::max(to, granule * granularity_);
    const std::size_t high = std::min(to + size, (granule + 1) * granularity_);
    memory_->copy(base_ + low, base_ + low + shift, high - low);
    result.bytes_copied += high - low;
  }

  // 3. Remap whole granules: the old granule's physical granule is mapped at the new place too.
  const std::size_t taken = move_scratch_.size();
  for (std::size_t granule = first; granule < end; ++granule) {
    if (!remaps(from, to, size, granule)) continue;
    try {
      map_granule(granule, granules_[granule + shift / granularity_].physical);
    } catch (const OutOfMemoryError&) {
      // Nothing was written to the block's old place: forget the new mappings and the taken granules.
      for (std::size_t index = taken; index < move_scratch_.size(); ++index) {
        drop_piece(move_scratch_[index], 0);
        memory_->unmap(base_ + move_scratch_[index] * granularity_);
        unlink_mapping(move_scratch_[index]);
      }
      move_scratch_.resize(taken);
      undo_taken();
      return false;
    }
    take_piece(granule, 0);
    move_scratch_.push_back(granule);
    result.bytes_remapped += granularity_;
  }

  // 4. The new block: split the hole so that the block starts at its low end or ends at its high end.
  const std::uint32_t hole = move.hole;
  const std::size_t hole_offset = nodes_[hole].offset;
  const std::size_t hole_end = hole_offset + nodes_[hole].size;
  if (to != hole_offset && to + size != hole_end) {
    const std::uint32_t gap = new_node();  // from the spare list (prepare_carve)
    nodes_[gap].offset = hole_offset;
    nodes_[gap].size = to - hole_offset;
    rekey_free(hole, to, hole_end - to);
    link_before(gap, hole);
    insert_free(gap);
  }
  const std::uint32_t moved = carve(Placement{hole, to, 0, 0, true}, size);
  nodes_[moved].in_use = true;
  nodes_[moved].requested = nodes_[block].requested;
  set_slot(to, moved);

  // 5. Release the old block; the old granules that were remapped lose their mapping.
  set_slot(from, kNone);
  release_granules(block);
  for (std::size_t index = taken; index < move_scratch_.size(); ++index) {
    const std::size_t old_granule = move_scratch_[index] + shift / granularity_;
    memory_->unmap(base_ + old_granule * granularity_);
    unlink_mapping(old_granule);
  }
  release_block(block);
  move_scratch_.clear();
  ++result.blocks_moved;
  stats_.bytes_reserved = committed_granules_ * granularity_;
  stats_.update_peaks();
  return true;
}

// Slides an in-use block down over the free block right below it (the two trade places; they may overlap):
// the block's new granules below are taken (kept, claimed, or fresh within the limit), the bytes copied in one
// overlapping copy, its old granules above the new end dropped. False (nothing changed) when it would take more
// fresh granules than it gives back, or a granule cannot be taken. The caller tells the relocator.
bool ExpandableArena::slide_block(std::uint32_t block, CompactionResult& result) {
  const std::uint32_t hole = nodes_[block].prev;
  const std::size_t size = nodes_[block].size;
  const std::size_t from = nodes_[block].offset;
  const std::size_t to = nodes_[hole].offset;
  const std::size_t new_first = first_granule(to);
  const std::size_t new_end = end_granule(to, size);
  const std::size_t old_first = first_granule(from);
  const std::size_t old_end = end_granule(from, size);
  const std::size_t taken_end =
      std::min(new_end, old_first);  // [new_first, taken_end): granules only the new place touches
  const std::size_t dropped_first = std::max(old_first, new_end);  // [dropped_first, old_end): only the old place
  std::size_t fresh = 0;
  for (std::size_t granule = new_first; granule < taken_end; ++granule) fresh += granules_[granule].users == 0 ? 1 : 0;
  std::size_t freed = 0;
  for (std::size_t granule = dropped_first; granule < old_end; ++granule)
    freed += granules_[granule].users == 1 ? 1 : 0;
  // Cached granules (those the slides below gave back) serve fresh ones without committing more; beyond them a
  // slide may create only as many as it gives back, within the limit.
  const std::size_t limit_granules = options_.limit_bytes / granularity_;
  const std::size_t created = fresh > cached_count_ ? fresh - cached_count_ : 0;
  if (created > freed || committed_granules_ + created > limit_granules) return false;
  // Everything that may allocate, before the first change.
  const std::size_t touched = taken_end > new_first ? taken_end - new_first : 0;
  if (physicals_.capacity() < physicals_.size() + touched) physicals_.reserve(2 * physicals_.size() + touched);
  if (free_physicals_.capacity() < physicals_.capacity()) free_physicals_.reserve(physicals_.capacity());

  // 1. The new place's granules below the old place (as move_block takes them).
  for (std::size_t granule = new_first; granule < taken_end; ++granule) {
    const Granule& entry = granules_[granule];
    const bool keep = entry.users != 0 || (entry.physical != kNone && physicals_[entry.physical].users == 0);
    bool taken = keep;
    if (!keep && (lru_newest_ != kNone || committed_granules_ < limit_granules)) {
      try {
        map_granule(granule, lru_newest_ != kNone ? lru_newest_ : new_physical());  // a new one stays cached
        taken = true;
      } catch (const OutOfMemoryError&) {
        taken = false;
      }
    }
    if (!taken) {
      for (std::size_t undo = new_first; undo < granule; ++undo) drop_piece(undo, 0);
      stats_.bytes_reserved = committed_granules_ * granularity_;
      return false;
    }
    take_piece(granule, 0);
  }
  // 2. The bytes, both places mapped (they may overlap: copy() moves like memmove).
  memory_->copy(base_ + to, base_ + from, size);
  result.bytes_copied += size;
  // 3. The old place's granules above the new end lose this user.
  for (std::size_t granule = old_end; granule-- > dropped_first;) drop_piece(granule, 0);
  // 4. The block and the free block trade places; the free block merges with a free block above, or is cut off
  //    at the extent's end.
  erase_free(hole);
  const std::uint32_t before = nodes_[hole].prev;
  const std::uint32_t after = nodes_[block].next;
  nodes_[block].prev = before;
  if (before != kNone) {
    nodes_[before].next = block;
  } else {
    first_block_ = block;
  }
  nodes_[hole].prev = block;
  nodes_[hole].next = after;
  nodes_[block].next = hole;
  if (after != kNone) {
    nodes_[after].prev = hole;
  } else {
    last_block_ = hole;
  }
  nodes_[block].offset = to;
  nodes_[hole].offset = to + size;
  set_slot(from, kNone);
  set_slot(to, block);
  if (after == kNone) {
    extent_ = to + size;
    unlink(hole);
  } else if (!nodes_[after].in_use) {
    rekey_free(after, nodes_[hole].offset, nodes_[after].size + nodes_[hole].size);
    unlink(hole);
  } else {
    insert_free(hole);
  }
  ++result.blocks_moved;
  stats_.bytes_reserved = committed_granules_ * granularity_;
  stats_.update_peaks();
  return true;
}

// The highest free block with at least `bytes` free from its start to the extent's end, or the lowest one.
std::uint32_t ExpandableArena::slide_start(std::size_t bytes) const noexcept {
  std::uint32_t start = kNone;
  std::size_t free_above = 0;
  for (std::uint32_t index = last_block_; index != kNone; index = nodes_[index].prev) {
    if (nodes_[index].in_use) continue;
    start = index;
    free_above += nodes_[index].size;
    if (free_above >= bytes) break;
  }
  return start;
}

CompactionResult ExpandableArena::start_compaction() const noexcept {
  CompactionResult result;
  result.granularity = granularity_;
  result.committed_before = committed_granules_ * granularity_;
  result.committed_after = result.committed_before;
  return result;
}

// Gives back the granules the moves emptied and records the result; `used_before` counted the granules in use
// (committed, not cached) when the compaction began.
CompactionResult ExpandableArena::finish_compaction(CompactionResult& result, std::size_t used_before, bool give_back) {
  if (give_back) decommit_cached(0);
  const std::size_t used_after = committed_granules_ - cached_count_;
  result.granules_freed = used_before > used_after ? used_before - used_after : 0;
  result.committed_after = committed_granules_ * granularity_;
  last_compaction_ = result;
  return result;
}

CompactionResult ExpandableArena::compact_sliding(Relocator& relocator, std::size_t bytes) {
  CompactionResult result = start_compaction();
  if (options_.share_granules) return result;
  result.ran = true;
  const std::size_t used_before = committed_granules_ - cached_count_;
  std::uint32_t index = slide_start(bytes);
  try {
    while (index != kNone) {
      const std::uint32_t next = nodes_[index].next;
      const std::uint32_t prev = nodes_[index].prev;
      if (nodes_[index].in_use && prev != kNone && !nodes_[prev].in_use) {
        const std::size_t requested = nodes_[index].requested;
        char* const old_address = base_ + nodes_[index].offset;
        if (relocator.can_move(old_address, requested) && slide_block(index, result)) {
          relocator.relocated(old_address, base_ + nodes_[index].offset, requested);
        }
      }
      index = next;
    }
  } catch (const std::bad_alloc&) {
    // Room for the physical granule table (reserved before any change of a slide): the slides made stand.
  }
  return finish_compaction(result, used_before);
}

ExpandableArena::Move ExpandableArena::find_evacuation(std::uint32_t block, std::size_t avoid) const {
  const Block& moving = nodes_[block];
  const std::size_t size = moving.size;
  const std::size_t avoid_start = avoid * granularity_;
  const std::size_t avoid_end = avoid_start + granularity_;
  std::size_t examined = 0;
  for (std::uint32_t index = free_lower_bound(size); index != kNone && examined < kMaxEvacuationHoles;
       index = free_next(index), ++examined) {
    const Block& hole = nodes_[index];
    // The same offset within a granule first (whole granules are remapped, not copied), then either end.
    const std::size_t aligned = hole.offset + (moving.offset - hole.offset) % granularity_;
    for (const std::size_t offset : {aligned, hole.offset, hole.offset + hole.size - size}) {
      if (offset + size > hole.offset + hole.size || (offset < avoid_end && offset + size > avoid_start)) continue;
      // move_block remaps whole granules only downwards (its shift is unsigned): a block that would keep its
      // offset within a granule above its old place is not moved there.
      if (offset > moving.offset && (offset - moving.offset) % granularity_ == 0 && size >= granularity_) continue;
      if (move_cost(block, offset).fresh == 0) return Move{index, offset, true};
    }
  }
  return Move{};
}

CompactionResult ExpandableArena::compact_evacuating(Relocator& relocator, std::size_t size) {
  CompactionResult result = start_compaction();
  if (options_.share_granules) return result;
  result.ran = true;
  const std::size_t used_before = committed_granules_ - cached_count_;
  // What evacuating each granule copies: the bytes of the in-use blocks touching it; none where a block may
  // not move. Cheapest first; none that copies more than kMaxEvacuationGranules granules' worth to free one.
  // `anchor`: an in-use block touching each granule, where the search for the granule's blocks starts.
  constexpr std::size_t kPinned = ~std::size_t{0};
  std::vector<std::size_t> cost(granules_.size(), 0);
  std::vector<std::uint32_t> anchor(granules_.size(), kNone);
  for (std::uint32_t index = first_block_; index != kNone; index = nodes_[index].next) {
    const Block& block = nodes_[index];
    if (!block.in_use) continue;
    const bool movable = relocator.can_move(base_ + block.offset, block.requested);
    for (std::size_t granule = first_granule(block.offset); granule < end_granule(block.offset, block.size);
         ++granule) {
      cost[granule] = movable && cost[granule] != kPinned ? cost[granule] + block.size : kPinned;
      anchor[granule] = index;
    }
  }
  std::vector<std::size_t> order;
  for (std::size_t granule = 0; granule < cost.size(); ++granule) {
    if (cost[granule] != 0 && cost[granule] <= kMaxEvacuationGranules * granularity_) order.push_back(granule);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cost[a] < cost[b]; });
  // A granule that took a moved block is not evacuated after it (the block would move twice).
  std::vector<bool> received(cost.size(), false);
  std::vector<std::uint32_t> touching;
  try {
    for (const std::size_t granule : order) {
      if (granules_[granule].users == 0 || received[granule]) continue;  // emptied or filled by earlier moves
      if (best_fit(size).new_granules == 0) break;
      const std::size_t start = granule * granularity_;
      const std::size_t end = start + granularity_;
      const auto overlaps = [&](std::uint32_t index) {
        return nodes_[index].offset < end && nodes_[index].offset + nodes_[index].size > start;
      };
      // The blocks touching the granule are consecutive in address order: from the anchor back and forth. An
      // anchor that an earlier move took away (its node no longer an in-use block here) means a walk from the
      // first block. An in-use node is always linked, so one that still overlaps is a sound start.
      std::uint32_t from = anchor[granule];
      if (from == kNone || !nodes_[from].in_use || !overlaps(from)) {
        from = first_block_;
        while (from != kNone && !overlaps(from)) from = nodes_[from].next;
      }
      while (from != kNone && nodes_[from].prev != kNone && overlaps(nodes_[from].prev)) from = nodes_[from].prev;
      touching.clear();
      for (std::uint32_t index = from; index != kNone && overlaps(index); index = nodes_[index].next) {
        if (nodes_[index].in_use) touching.push_back(index);
      }
      for (const std::uint32_t index : touching) {
        const std::size_t requested = nodes_[index].requested;
        const std::size_t bytes = nodes_[index].size;
        char* const old_address = base_ + nodes_[index].offset;
        // Movable: the cost pass asked the relocator, and no block has entered the granule since (the granules
        // moved blocks enter are skipped).
        const Move move = find_evacuation(index, granule);
        if (!move.valid || !move_block(index, move, result)) break;
        relocator.relocated(old_address, base_ + move.offset, requested);
        const std::size_t last = std::min(end_granule(move.offset, bytes), received.size());
        for (std::size_t to = first_granule(move.offset); to < last; ++to) received[to] = true;
      }
    }
  } catch (const std::bad_alloc&) {
    // Bookkeeping room for the next move (move_block reserves it before changing anything): the moves made
    // stand, each reported to the relocator.
  }
  // The granules it emptied stay cached: the request takes them.
  return finish_compaction(result, used_before, false);
}

CompactionResult ExpandableArena::do_compact(Relocator& relocator) {
  std::lock_guard lock(mutex_);
  flush_kept();  // a kept block has no owner that could let it move
  const CompactionResult result = compact_locked(relocator);
  count_compaction(result);
  return result;
}

void ExpandableArena::count_compaction(const CompactionResult& result) noexcept {
  if (result.blocks_moved == 0) return;  // nothing could move: no compaction ran
  ++stats_.num_compactions;
  stats_.bytes_compacted += result.bytes_copied + result.bytes_remapped;
}

CompactionResult ExpandableArena::compact_locked(Relocator& relocator) {
  CompactionResult result = start_compaction();
  if (options_.share_granules) {
    last_compaction_ = result;
    return result;
  }
  result.ran = true;
  const std::size_t used_before = committed_granules_ - cached_count_;
  // Highest first: freeing the top of the extent shrinks it, and lower holes are filled first. A pass moves
  // each block at most once; moves open holes (the old places) that a block examined earlier in the pass
  // could use, so passes repeat while they move something (each move lowers a block: they end).
  std::vector<std::uint32_t> order;
  order.reserve(in_use_count_);  // the only throw that leaves: nothing moved yet
  try {
    for (std::size_t pass = 0; pass < kCompactionPasses; ++pass) {
      order.clear();
      for (std::uint32_t index = last_block_; index != kNone; index = nodes_[index].prev) {
        if (nodes_[index].in_use) order.push_back(index);
      }
      const std::size_t moved_before = result.blocks_moved;
      for (const std::uint32_t index : order) {
        const std::size_t requested = nodes_[index].requested;
        char* const old_address = base_ + nodes_[index].offset;
        if (!relocator.can_move(old_address, requested)) continue;
        const Move move = find_move(index);
        if (!move.valid || !move_block(index, move, result)) continue;
        relocator.relocated(old_address, base_ + move.offset, requested);
      }
      if (result.blocks_moved == moved_before) break;
    }
  } catch (const std::bad_alloc&) {
    // Bookkeeping room for the next move (move_block reserves it before changing anything): the moves made
    // stand, each reported to the relocator; stop here.
  }
  return finish_compaction(result, used_before);
}

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
// ExpandableArena: the read-only views (blocks, stats, invariants).
#include <algorithm>
#include <array>
#include <bit>
#include <sstream>

#include "tensorpool/memory/expandable_arena.hpp"

namespace tp::memory {

std::vector<ExpandableArena::BlockInfo> ExpandableArena::blocks() const {
  std::lock_guard lock(mutex_);
  std::vector<BlockInfo> result;
  for (std::uint32_t index = first_block_; index != kNone; index = nodes_[index].next) {
    const Block& block = nodes_[index];
    result.push_back(BlockInfo{block.offset, block.size, block.requested, block.in_use && !block.kept});
  }
  return result;
}

std::size_t ExpandableArena::committed_bytes() const {
  std::lock_guard lock(mutex_);
  return committed_granules_ * granularity_;
}

std::size_t ExpandableArena::largest_committed_free_block() const {
  // The free bytes the arena holds are the mapped bytes no in-use block covers: the mapped parts of
  // free blocks, and mapped granules past the extent (kept after the tail block was freed, or the rest of
  // the tail's last granule). Each maximal mapped run of either is one free block: in-use blocks separate
  // free blocks and the tail block is always in use, so no two runs touch.
  std::size_t best = 0;
  const auto scan = [this, &best](std::size_t begin, std::size_t end) {
    std::size_t granule = first_granule(begin);
    const std::size_t last = std::min(end_granule(begin, end - begin), granules_.size());
    while (granule < last) {
      if (granules_[granule].physical == kNone) {
        ++granule;
        continue;
      }
      std::size_t run_end = granule;
      while (run_end < last && granules_[run_end].physical != kNone) ++run_end;
      const std::size_t from = std::max(begin, granule * granularity_);
      const std::size_t to = std::min(end, run_end * granularity_);
      if (to > from) best = std::max(best, to - from);
      granule = run_end;
    }
  };
  if (granules_.size() * granularity_ > extent_) scan(extent_, granules_.size() * granularity_);
  if (kept_blocks_ != 0) {
    // Kept blocks are free to callers and a request takes their room once they are given back: runs of free and
    // kept blocks in address order count as one.
    std::size_t run_begin = 0;
    bool in_run = false;
    for (std::uint32_t index = first_block_; index != kNone; index = nodes_[index].next) {
      const Block& block = nodes_[index];
      const bool free_to_callers = !block.in_use || block.kept;
      if (free_to_callers && !in_run) run_begin = block.offset;
      if (!free_to_callers && in_run) scan(run_begin, block.offset);
      in_run = free_to_callers;
    }
    if (in_run) scan(run_begin, extent_);
    return best;
  }
  for (std::uint32_t index = free_last(); index != kNone && nodes_[index].size > best; index = free_prev(index)) {
    scan(nodes_[index].offset, nodes_[index].offset + nodes_[index].size);
  }
  return best;
}

MemoryStats ExpandableArena::do_stats() const {
  std::lock_guard lock(mutex_);
  MemoryStats stats = stats_;
  stats.bytes_reserved = committed_granules_ * granularity_;
  stats.largest_free_block = largest_committed_free_block();
  stats.bytes_limit = options_.limit_bytes;
  return stats;
}

std::string ExpandableArena::check_invariants() const {
  std::lock_guard lock(mutex_);
  std::ostringstream problem;
  std::size_t expected_offset = 0;
  std::size_t free_count = 0;
  std::size_t in_use_count = 0;
  std::size_t in_use_bytes = 0;
  std::size_t requested_bytes = 0;
  std::vector<std::uint32_t> users(granules_.size(), 0);
  std::vector<std::uint64_t> masks(granules_.size(), 0);
  std::size_t kept_count = 0;
  std::size_t kept_bytes = 0;
  std::uint32_t prev = kNone;
  bool prev_free = false;
  for (std::uint32_t index = first_block_; index != kNone; index = nodes_[index].next) {
    const Block& block = nodes_[index];
    if (block.prev != prev) problem << "block " << index << " has prev " << block.prev << ", expected " << prev;
    if (block.offset != expected_offset) problem << "gap or overlap at offset " << expected_offset;
    if (block.size == 0 || block.size % kBlockAlignment != 0) problem << "bad block size " << block.size;
    if (!problem.str().empty()) return problem.str();
    if (block.kept && !block.in_use) return "free block at " + std::to_string(block.offset) + " marked kept";
    if (block.kept) {
      ++kept_count;
      kept_bytes += block.size;
      if (block.requested != 0 || block_at(block.offset) != kNone) {
        return "kept block at " + std::to_string(block.offset) + " still counted in use";
      }
    } else if (block.in_use) {
      ++in_use_count;
      in_use_bytes += block.size;
      requested_bytes += block.requested;
      if (block_at(block.offset) != index) {
        return "in-use index misses offset " + std::to_string(block.offset);
      }
    }
    if (block.in_use) {
      const std::size_t end = end_granule(block.offset, block.size);
      if (end > users.size()) return "granule table too short for the block at " + std::to_string(block.offset);
      for (std::size_t granule = first_granule(block.offset); granule < end; ++granule) {
        ++users[granule];
        masks[granule] |= piece_mask(granule, block.offset, block.offset + block.size);
      }
    } else {
      if (prev_free) return "two adjacent free blocks at offset " + std::to_string(block.offset);
      ++free_count;
      if (!free_contains(index)) {
        return "free block at " + std::to_string(block.offset) + " missing from the free index";
      }
    }
    prev_free = !block.in_use;
    expected_offset = block.offset + block.size;
    prev = index;
  }
  if (prev != last_block_) return "last block link is stale";
  if (expected_offset != extent_) {
    return "blocks end at " + std::to_string(expected_offset) + ", extent is " + std::to_string(extent_);
  }
  if (prev_free) return "the tail block is free";
  if (extent_ > range_bytes_) return "extent beyond the reserved range";
  if (std::string error = check_free_index(free_count); !error.empty()) return error;
  // Every in-use block's entry names it (checked above); equal counts then rule out stray entries.
  if (in_use_count != slots_in_use_ || in_use_count != in_use_count_) return "in-use index size mismatch";
  if (in_use_bytes != stats_.bytes_in_use) return "bytes_in_use does not match the in-use blocks";
  if (requested_bytes != stats_.bytes_requested) return "bytes_requested does not match the in-use blocks";
  if (std::string error = check_kept(kept_count, kept_bytes); !error.empty()) return error;
  if (std::string error = check_granules(users, masks); !error.empty()) return error;
  if (committed_granules_ * granularity_ > options_.limit_bytes) return "committed bytes exceed the limit";
  if (stats_.bytes_reserved != committed_granules_ * granularity_) return "bytes_reserved != committed bytes";
  return "";
}

std::string ExpandableArena::check_granules(const std::vector<std::uint32_t>& users,
                                            const std::vector<std::uint64_t>& masks) const {
  std::vector<std::uint64_t> union_masks(physicals_.size(), 0);
  std::vector<std::uint32_t> physical_users(physicals_.size(), 0);
  for (std::size_t index = 0; index < users.size(); ++index) {
    const Granule& granule = granules_[index];
    const std::string where = "granule " + std::to_string(index);
    if (users[index] != granule.users) return where + " user count is wrong";
    if (masks[index] != granule.mask) return where + " chunk mask is wrong";
    if (granule.users != 0 && granule.physical == kNone) return where + " is used but not mapped";
    if (granule.physical == kNone) continue;
    if (granule.physical >= physicals_.size() || !physicals_[granule.physical].committed) {
      return where + " is mapped to an uncommitted physical granule";
    }
    if ((union_masks[granule.physical] & granule.mask) != 0) return where + " overlaps another mapping";
    union_masks[granule.physical] |= granule.mask;
    if (granule.users != 0) ++physical_users[granule.physical];
  }
  std::size_t committed = 0;
  std::size_t cached = 0;
  std::size_t mappings = 0;
  for (std::size_t index = 0; index < physicals_.size(); ++index) {
    const Physical& physical = physicals_[index];
    const std::string where = "physical granule " + std::to_string(index);
    if (!physical.committed) {
      if (physical.first_mapping != kNone || physical.cached) return where + " is uncommitted but in use";
      if (std::find(free_physicals_.begin(), free_physicals_.end(), index) == free_physicals_.end()) {
        return where + " is uncommitted but not on the free list";
      }
      continue;
    }
    ++committed;
    if (physical.mask != union_masks[index]) return where + " mask is not the union of its mappings'";
    if (physical.users != physical_users[index]) return where + " user count is wrong";
    if (physical.cached != (physical.users == 0)) return where + " cached flag is wrong";
    if (physical.cached) ++cached;
    for (std::uint32_t granule = physical.first_mapping; granule != kNone; granule = granules_[granule].next_mapping) {
      if (granule >= granules_.size() || granules_[granule].physical != index || ++mappings > granules_.size()) {
        return where + " mapping list is corrupt";
      }
    }
    const bool partial = options_.share_granules && physical.users != 0 && physical.mask != kAllChunks;
    const std::array<unsigned, 2> free_ends = {partial ? static_cast<unsigned>(std::countr_zero(physical.mask)) : 0u,
                                               partial ? static_cast<unsigned>(std::countl_zero(physical.mask)) : 0u};
    for (std::size_t end = 0; end < 2; ++end) {
      if (physical.partial_list[end] != free_ends[end]) return where + " is on the wrong partial list";
      if (free_ends[end] == 0) continue;
      std::uint32_t walk = partial_heads_[end][free_ends[end]];
      while (walk != kNone && walk != index) walk = physicals_[walk].next_partial[end];
      if (walk == kNone) return where + " is missing from its partial list";
    }
  }
  std::size_t mapped = 0;
  for (const Granule& granule : granules_) mapped += granule.physical != kNone ? 1 : 0;
  if (mapped != mappings) return "mapped granules and mapping lists disagree";
  for (std::size_t end = 0; end < 2; ++end) {
    for (std::size_t count = 0; count < kChunks; ++count) {
      const bool listed = partial_heads_[end][count] != kNone;
      if (listed != (((partial_nonempty_[end] >> count) & 1u) != 0)) return "partial list mask is stale";
    }
  }
  if (free_physicals_.size() != physicals_.size() - committed) return "the free physical list is wrong";
  std::size_t listed = 0;
  std::uint32_t older = kNone;
  for (std::uint32_t index = lru_oldest_; index != kNone; index = physicals_[index].newer) {
    if (index >= physicals_.size() || !physicals_[index].cached || physicals_[index].older != older ||
        ++listed > cached) {
      return "the cached-granule list is corrupt at physical granule " + std::to_string(index);
    }
    if (physicals_[index].cached_since > events_ ||
        (older != kNone && physicals_[index].cached_since < physicals_[older].cached_since)) {
      return "the cached-granule list is out of stamp order at physical granule " + std::to_string(index);
    }
    older = index;
  }
  if (older != lru_newest_) return "the cached-granule list's newest end is stale";
  if (listed != cached || cached != cached_count_) return "cached granule count is wrong";
  if (committed != committed_granules_) return "committed granule count is wrong";
  return "";
}

std::string ExpandableArena::check_kept(std::size_t kept_count, std::size_t kept_bytes) const {
  if (kept_count != kept_blocks_ || kept_bytes != kept_bytes_) return "kept block count or bytes mismatch";
  if (kept_bytes_ > options_.reuse_bytes) return "kept blocks exceed reuse_bytes";
  std::size_t listed = 0;
  for (std::size_t bin = 0; bin < kBins; ++bin) {
    std::uint32_t before = kNone;
    for (std::uint32_t index = kept_heads_[bin]; index != kNone; before = index, index = nodes_[index].right) {
      const Block& block = nodes_[index];
      if (!block.kept || bin_of(block.size) != bin || block.left != before) {
        return "kept list of bin " + std::to_string(bin) + " broken at block " + std::to_string(index);
      }
      if (++listed > kept_blocks_) return "kept lists hold more blocks than are kept";
    }
  }
  if (listed != kept_blocks_) return "a kept block is on no kept list";
  if (kept_entries_ > kept_ring_.size()) return "kept ring overfull";
  std::vector<bool> in_ring(nodes_.size(), false);
  for (std::size_t entry = 0; entry < kept_entries_; ++entry) {
    in_ring[kept_ring_[(kept_front_ + entry) % kept_ring_.size()]] = true;
  }
  for (std::uint32_t index = first_block_; index != kNone; index = nodes_[index].next) {
    if (nodes_[index].kept && !in_ring[index]) {
      return "kept block at " + std::to_string(nodes_[index].offset) + " not in the keep order";
    }
  }
  return "";
}

}  // namespace tp::memory

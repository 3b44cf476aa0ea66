// SPDX-License-Identifier: Apache-2.0
// ExpandableArena: granule bookkeeping (virtual granules mapped to physical granules that several of them
// may share, per-granule chunk masks and user counts, the cache of unused physical granules and the release
// policy). The caller holds mutex_.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
// ---- partial lists: physical granules with users and free chunks at an end -------------------------------

void ExpandableArena::partial_insert(std::uint32_t physical) noexcept {
  Physical& entry = physicals_[physical];
  // Only sharing looks for partly used granules (take_piece and drop_piece keep the lists only then).
  if (entry.users == 0 || entry.mask == kAllChunks) return;
  const std::array<unsigned, 2> free_chunks = {static_cast<unsigned>(std::countr_zero(entry.mask)),
                                               static_cast<unsigned>(std::countl_zero(entry.mask))};
  for (std::size_t end = 0; end < 2; ++end) {
    const unsigned count = free_chunks[end];
    if (count == 0) continue;
    std::uint32_t& head = partial_heads_[end][count];
    entry.partial_list[end] = static_cast<std::uint8_t>(count);
    entry.prev_partial[end] = kNone;
    entry.next_partial[end] = head;
    if (head != kNone) physicals_[head].prev_partial[end] = physical;
    head = physical;
    partial_nonempty_[end] |= std::uint64_t{1} << count;
  }
}

void ExpandableArena::partial_remove(std::uint32_t physical) noexcept {
  Physical& entry = physicals_[physical];
  for (std::size_t end = 0; end < 2; ++end) {
    const unsigned count = entry.partial_list[end];
    if (count == 0) continue;
    const std::uint32_t prev = entry.prev_partial[end];
    const std::uint32_t next = entry.next_partial[end];
    if (prev != kNone) {
      physicals_[prev].next_partial[end] = next;
    } else {
      partial_heads_[end][count] = next;
      if (next == kNone) partial_nonempty_[end] &= ~(std::uint64_t{1} << count);
    }
    if (next != kNone) physicals_[next].prev_partial[end] = prev;
    entry.partial_list[end] = 0;
    entry.prev_partial[end] = kNone;
    entry.next_partial[end] = kNone;
  }
}

std::uint32_t ExpandableArena::find_partial(std::uint64_t mask, std::uint32_t taken,
                                            std::uint64_t taken_mask) const noexcept {
  // A piece of chunks [first, end) fits a granule with >= end free bottom chunks, or >= 64 - first free top
  // chunks. The tightest such list first; `taken` only when the earlier piece does not overlap.
  const std::array<unsigned, 2> needed = {static_cast<unsigned>(kChunks - std::countl_zero(mask)),
                                          static_cast<unsigned>(kChunks - std::countr_zero(mask))};
  std::uint32_t best = kNone;
  unsigned best_slack = kChunks;
  for (std::size_t end = 0; end < 2; ++end) {
    if (needed[end] >= kChunks) continue;
    std::uint64_t lists = partial_nonempty_[end] & (kAllChunks << needed[end]);
    while (lists != 0) {
      const auto count = static_cast<unsigned>(std::countr_zero(lists));
      if (count - needed[end] >= best_slack) break;
      std::uint32_t physical = partial_heads_[end][count];
      while (physical != kNone && physical == taken && (taken_mask & mask) != 0) {
        physical = physicals_[physical].next_partial[end];
      }
      if (physical != kNone) {
        best = physical;
        best_slack = count - needed[end];
        break;
      }
      lists &= lists - 1;
    }
  }
  return best;
}

ExpandableArena::Choice ExpandableArena::choose(std::size_t granule, std::uint64_t mask, std::uint32_t taken,
                                                std::uint64_t taken_mask) const noexcept {
  if (granule < granules_.size() && granules_[granule].physical != kNone) {
    const Granule& virtual_granule = granules_[granule];
    const std::uint32_t physical = virtual_granule.physical;
    std::uint64_t others = physicals_[physical].mask & ~virtual_granule.mask;
    if (physical == taken) others |= taken_mask;
    if ((others & mask) == 0) {
      if (virtual_granule.users != 0) return {Need::keep, physical};
      const bool used = physicals_[physical].users != 0 || physical == taken;
      if (!used) return {Need::claim, physical};
      // Without sharing a physical granule other granules use is not joined: remap to one of its own.
      if (options_.share_granules) return {Need::share, physical};
    } else if (virtual_granule.users != 0) {
      return {Need::invalid, kNone};
    }
  }
  if (options_.share_granules && mask != kAllChunks) {
    const std::uint32_t physical = find_partial(mask, taken, taken_mask);
    if (physical != kNone) return {Need::share, physical};
  }
  return {Need::fresh, kNone};
}

// ---- mappings and pieces -------------------------------------------------------------------------------

void ExpandableArena::unlink_mapping(std::size_t granule) noexcept {
  Granule& entry = granules_[granule];
  if (entry.physical == kNone) return;
  if (entry.prev_mapping != kNone) {
    granules_[entry.prev_mapping].next_mapping = entry.next_mapping;
  } else {
    physicals_[entry.physical].first_mapping = entry.next_mapping;
  }
  if (entry.next_mapping != kNone) granules_[entry.next_mapping].prev_mapping = entry.prev_mapping;
  entry.physical = kNone;
  entry.prev_mapping = kNone;
  entry.next_mapping = kNone;
}

// The granule has no users: its mask is empty, so moving it changes no physical granule's mask.
void ExpandableArena::map_granule(std::size_t granule, std::uint32_t physical) {
  memory_->map(base_ + granule * granularity_, physicals_[physical].handle);
  unlink_mapping(granule);
  Granule& entry = granules_[granule];
  entry.physical = physical;
  entry.next_mapping = physicals_[physical].first_mapping;
  if (entry.next_mapping != kNone) granules_[entry.next_mapping].prev_mapping = static_cast<std::uint32_t>(granule);
  physicals_[physical].first_mapping = static_cast<std::uint32_t>(granule);
}

void ExpandableArena::take_piece(std::size_t granule, std::uint64_t mask) noexcept {
  Granule& entry = granules_[granule];
  const std::uint32_t physical = entry.physical;
  Physical& target = physicals_[physical];
  const bool share = options_.share_granules;  // without sharing: no masks, no partial lists
  if (share) partial_remove(physical);
  if (entry.users++ == 0 && target.users++ == 0 && target.cached) lru_remove(physical);
  entry.mask |= mask;
  target.mask |= mask;
  if (share) partial_insert(physical);
}

void ExpandableArena::drop_piece(std::size_t granule, std::uint64_t mask) noexcept {
  Granule& entry = granules_[granule];
  const std::uint32_t physical = entry.physical;
  Physical& target = physicals_[physical];
  const bool share = options_.share_granules;
  if (share) partial_remove(physical);
  entry.mask &= ~mask;
  target.mask &= ~mask;
  if (--entry.users == 0 && --target.users == 0) {
    lru_push_newest(physical);
  } else if (share) {
    partial_insert(physical);
  }
}

std::uint32_t ExpandableArena::new_physical() {
  const VirtualMemory::PhysicalHandle handle = memory_->create_physical();  // may throw OutOfMemoryError
  // Room was reserved (prepare_carve): neither line below allocates.
  std::uint32_t index = 0;
  if (!free_physicals_.empty()) {
    index = free_physicals_.back();
    free_physicals_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(physicals_.size());
    physicals_.emplace_back();
  }
  physicals_[index] = Physical{};
  physicals_[index].handle = handle;
  physicals_[index].committed = true;
  ++committed_granules_;
  ++stats_.upstream_allocs;
  lru_push_newest(index);
  return index;
}

void ExpandableArena::prepare_carve(const Placement& placement, std::size_t size) {
  // carve takes at most two new nodes (a free block before a padded end placement, and the block): have
  // them on the spare list (free_node cannot allocate).
  if (spare_nodes_.size() < 2) {
    const std::uint32_t one = new_node();  // from the spare list while it has one
    const std::uint32_t two = new_node();
    free_node(one);
    free_node(two);
  }
  reserve_slots(in_use_count_ + 1);
  const std::size_t first = first_granule(placement.offset);
  const std::size_t end = end_granule(placement.offset, size);
  if (placement.block == kNone) {  // a free block lies inside the extent, which granules_ covers
    if (granules_.size() < end) granules_.resize(end);
  } else if (static_cast<unsigned>(end - first <= 2) + static_cast<unsigned>(granules_[first].users != 0) +
                 static_cast<unsigned>(granules_[end - 1].users != 0) ==
             3) {  // one branch on the sum (the compiler splits a test of three flags into three branches)
    return;        // every granule it touches has users and keeps its physical granule: none is created
  }
  // Each touched granule creates at most one physical granule; releases must not allocate.
  const std::size_t touched = end - first;
  if (physicals_.capacity() < physicals_.size() + touched) physicals_.reserve(2 * physicals_.size() + touched);
  if (free_physicals_.capacity() < physicals_.capacity()) free_physicals_.reserve(physicals_.capacity());
  if (created_scratch_.capacity() < touched) created_scratch_.reserve(touched);
}

bool ExpandableArena::acquire_for(const Placement& placement, std::size_t size) {
  const std::size_t offset = placement.offset;
  const std::size_t first = first_granule(offset);
  const std::size_t end = end_granule(offset, size);
  if (!options_.share_granules && end - first <= 2 && granules_[first].users != 0 && granules_[end - 1].users != 0) {
    // Without sharing a granule with users keeps its own physical granule: the block only adds a user to each
    // (one granule or two; the loop below would do the same, with nothing to undo).
    ++granules_[first].users;
    granules_[end - 1].users += static_cast<std::uint32_t>(end - first == 2);  // one granule or two, no branch
    return true;
  }
  created_scratch_.clear();
  // Undoing a piece clears only the chunks it set: in-use neighbours may share the end granules' end chunks
  // (no chunks without sharing).
  const bool share = options_.share_granules;
  const std::uint64_t first_before = share ? granules_[first].mask : 0;
  const std::uint64_t last_before = share ? granules_[end - 1].mask : 0;
  const auto undo_pieces = [&](std::size_t stop) noexcept {
    for (std::size_t undo = first; undo < stop; ++undo) {
      std::uint64_t mask = piece_mask(undo, offset, offset + size);
      if (undo == first) mask &= ~first_before;
      if (undo == end - 1) mask &= ~last_before;
      drop_piece(undo, mask);
    }
    for (const std::uint32_t physical : created_scratch_) {
      lru_remove(physical);
      decommit_physical(physical);
    }
    created_scratch_.clear();
    stats_.bytes_reserved = committed_granules_ * granularity_;
  };
  std::size_t granule = first;
  bool refused = false;
  try {
    for (; granule < end; ++granule) {
      if (!options_.share_granules) {
        // Without sharing (no masks, no partial lists): a granule with users keeps its own physical granule;
        // one without claims the physical granule still mapped there when nothing else uses it, else takes a
        // fresh one (choose's answers for these cases, without its work): a cached one (exclusive_victim), or a
        // new one when the block's later granules claim every cached one. Which cached granule is taken changes
        // no placement (they weigh counts, not identities), only which mapping calls later blocks make.
        Granule& entry = granules_[granule];
        if (entry.users != 0) {
          ++entry.users;
          continue;
        }
        std::uint32_t physical = entry.physical;
        if (physical == kNone || physicals_[physical].users != 0) {
          physical = exclusive_victim(granule + 1, end);
          if (physical == kNone) {
            if (committed_granules_ >= options_.limit_bytes / granularity_) {
              refused = true;
              break;
            }
            physical = new_physical();
            created_scratch_.push_back(physical);
          }
          map_granule(granule, physical);
        }
        // take_piece without masks and partial lists.
        ++entry.users;
        Physical& target = physicals_[physical];
        if (target.users++ == 0 && target.cached) lru_remove(physical);
        continue;
      }
      const std::uint64_t mask = piece_mask(granule, offset, offset + size);
      Choice choice = choose(granule, mask, kNone, 0);
      if (choice.need == Need::invalid) {  // placements are checked first: cannot happen
        refused = true;
        break;
      }
      if (choice.need == Need::fresh) {
        if (lru_newest_ != kNone) {
          choice.physical = lru_newest_;
        } else {
          if (committed_granules_ >= options_.limit_bytes / granularity_) {
            refused = true;
            break;
          }
          choice.physical = new_physical();
          created_scratch_.push_back(choice.physical);
        }
      }
      if (granules_[granule].physical != choice.physical) map_granule(granule, choice.physical);
      take_piece(granule, mask);
    }
  } catch (const OutOfMemoryError&) {
    refused = true;
  } catch (...) {
    undo_pieces(granule);
    throw;
  }
  if (refused) {
    undo_pieces(granule);
    return false;
  }
  created_scratch_.clear();
  stats_.bytes_reserved = committed_granules_ * granularity_;
  stats_.update_peaks();
  return true;
}

std::uint32_t ExpandableArena::exclusive_victim(std::size_t from, std::size_t end) const noexcept {
  // A cached granule still mapped at a later granule of the block without users is that granule's to claim:
  // taking it here would make that granule map another one (two calls where none was needed). Of the others,
  // each virtual granule a cached one is mapped at keeps that mapping only while no block there overlaps the
  // block taking it, so the fewest mappings leave the fewest granules to remap later; the least recently freed
  // first, whose mappings are the least likely to be placed on again.
  std::uint32_t best = kNone;
  std::size_t best_mappings = 0;
  std::size_t weighed = 0;
  for (std::uint32_t physical = lru_oldest_; physical != kNone; physical = physicals_[physical].newer) {
    bool claimed = false;
    std::size_t mappings = 0;
    for (std::uint32_t mapped = physicals_[physical].first_mapping; mapped != kNone;
         mapped = granules_[mapped].next_mapping) {
      ++mappings;
      if (mapped >= from && mapped < end && granules_[mapped].users == 0) {
        claimed = true;
        break;
      }
    }
    if (claimed) continue;
    if (best == kNone || mappings < best_mappings) {
      best = physical;
      best_mappings = mappings;
    }
    // Past the candidates, the first unclaimed one serves; one mapping (its last user's) is the fewest a
    // cached granule has once it has served a block.
    if (best_mappings <= 1 || ++weighed >= kVictimCandidates) break;
  }
  return best;
}

void ExpandableArena::release_granules(std::uint32_t block) noexcept {
  const Block& freed = nodes_[block];
  const std::size_t offset = freed.offset;
  const std::size_t end = offset + freed.size;
  if (!options_.share_granules) {  // no chunk masks: only the user counts change, highest granule first
    const std::size_t first = first_granule(offset);
    const std::size_t last = end_granule(offset, freed.size) - 1;
    if (last - first <= 1) {  // one granule or two (most blocks): counted without a branch on which
      const auto two = static_cast<std::uint32_t>(last != first);
      Granule& high = granules_[last];
      Granule& low = granules_[first];
      --high.users;
      low.users -= two;
      if (high.users == 0 && --physicals_[high.physical].users == 0) lru_push_newest(high.physical);
      if (two + static_cast<std::uint32_t>(low.users == 0) == 2 && --physicals_[low.physical].users == 0) {
        lru_push_newest(low.physical);
      }
      return;
    }
    for (std::size_t granule = last + 1; granule-- > first;) {
      // drop_piece without masks and partial lists.
      Granule& entry = granules_[granule];
      if (--entry.users == 0 && --physicals_[entry.physical].users == 0) lru_push_newest(entry.physical);
    }
    return;
  }
  const std::size_t chunk = std::size_t{1} << chunk_shift_;
  // The end chunks stay taken when an in-use neighbour (beyond a free one, at most) reaches into them.
  const std::size_t first_chunk = offset >> chunk_shift_;
  const std::size_t last_chunk = (end - 1) >> chunk_shift_;
  bool keep_first = false;
  if (const std::uint32_t prev = freed.prev; prev != kNone) {
    const std::size_t reach = nodes_[prev].in_use ? offset : nodes_[prev].offset;  // the in-use block's end
    keep_first = reach > first_chunk * chunk && (nodes_[prev].in_use || nodes_[prev].prev != kNone);
  }
  bool keep_last = false;
  if (const std::uint32_t next = freed.next; next != kNone) {
    const std::size_t start = nodes_[next].in_use ? end : nodes_[next].offset + nodes_[next].size;
    keep_last = start < (last_chunk + 1) * chunk;
  }
  if (first_chunk == last_chunk) keep_first = keep_last = keep_first || keep_last;
  const std::size_t first = first_granule(offset);
  const std::size_t last = end_granule(offset, freed.size);
  // Highest first, so a block's low granules (where best fit places the next request) are the newest.
  for (std::size_t granule = last; granule-- > first;) {
    std::uint64_t mask = piece_mask(granule, offset, end);
    if (keep_first && granule == first_chunk / kChunks) mask &= ~(std::uint64_t{1} << (first_chunk % kChunks));
    if (keep_last && granule == last_chunk / kChunks) mask &= ~(std::uint64_t{1} << (last_chunk % kChunks));
    drop_piece(granule, mask);
  }
}

// ---- the cache of unused physical granules --------------------------------------------------------------

void ExpandableArena::lru_push_newest(std::uint32_t physical) noexcept {
  Physical& entry = physicals_[physical];
  entry.cached = true;
  entry.cached_since = events_;
  entry.older = lru_newest_;
  entry.newer = kNone;
  if (lru_newest_ != kNone) {
    physicals_[lru_newest_].newer = physical;
  } else {
    lru_oldest_ = physical;
  }
  lru_newest_ = physical;
  ++cached_count_;
}

void ExpandableArena::lru_remove(std::uint32_t physical) noexcept {
  Physical& entry = physicals_[physical];
  if (entry.older != kNone) {
    physicals_[entry.older].newer = entry.newer;
  } else {
    lru_oldest_ = entry.newer;
  }
  if (entry.newer != kNone) {
    physicals_[entry.newer].older = entry.older;
  } else {
    lru_newest_ = entry.older;
  }
  entry.cached = false;
  entry.older = kNone;
  entry.newer = kNone;
  --cached_count_;
}

// The physical granule is committed, unused and off the LRU list.
void ExpandableArena::decommit_physical(std::uint32_t physical) noexcept {
  Physical& entry = physicals_[physical];
  while (entry.first_mapping != kNone) {
    const std::uint32_t granule = entry.first_mapping;
    memory_->unmap(base_ + std::size_t{granule} * granularity_);
    unlink_mapping(granule);
  }
  memory_->release_physical(entry.handle);
  entry = Physical{};
  free_physicals_.push_back(physical);  // never allocates: capacity >= physicals_.size()
  --committed_granules_;
  ++stats_.upstream_frees;
}

std::size_t ExpandableArena::decommit_cached(std::size_t keep_bytes) noexcept {
  const std::size_t keep = keep_bytes / granularity_;
  std::size_t released = 0;
  while (cached_count_ > keep) {
    const std::uint32_t oldest = lru_oldest_;
    lru_remove(oldest);
    decommit_physical(oldest);
    released += granularity_;
  }
  stats_.bytes_reserved = committed_granules_ * granularity_;
  return released;
}

void ExpandableArena::decommit_idle(std::size_t keep) noexcept {
  // The list is in stamp order: stop at the first granule freed within the window.
  while (cached_count_ > keep && events_ - physicals_[lru_oldest_].cached_since >= options_.release_decay_events) {
    const std::uint32_t oldest = lru_oldest_;
    lru_remove(oldest);
    decommit_physical(oldest);
  }
  stats_.bytes_reserved = committed_granules_ * granularity_;
}

}  // namespace tp::memory

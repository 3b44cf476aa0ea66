// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/expandable_arena.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

constexpr std::size_t kMinDefaultReserve = std::size_t{256} << 20;  // 256 MiB
constexpr std::size_t kMaxDefaultReserve = std::size_t{64} << 40;   // 64 TiB
constexpr std::size_t kReserveMultiple = 8;

std::size_t default_reserve(std::size_t limit) {
  const std::size_t scaled =
      limit > kMaxDefaultReserve / kReserveMultiple ? kMaxDefaultReserve : limit * kReserveMultiple;
  return std::clamp(scaled, kMinDefaultReserve, kMaxDefaultReserve);
}

}  // namespace

ExpandableArena::ExpandableArena(std::unique_ptr<VirtualMemory> memory, ArenaOptions options, std::string name)
    : ExpandableArena(nullptr, std::move(memory), options, std::move(name)) {}

ExpandableArena::ExpandableArena(VirtualMemory& memory, ArenaOptions options, std::string name)
    : ExpandableArena(&memory, nullptr, options, std::move(name)) {}

ExpandableArena::ExpandableArena(VirtualMemory* memory, std::unique_ptr<VirtualMemory> owned, ArenaOptions options,
                                 std::string name)
    : MemoryResource(std::move(name)),
      owned_memory_(std::move(owned)),
      memory_(memory != nullptr ? memory : owned_memory_.get()),
      options_(options) {
  if (memory_ == nullptr) TP_THROW(InvalidArgument, "memory", this->name(), ": no VirtualMemory given");
  if (options_.limit_bytes == 0) {
    TP_THROW(InvalidArgument, "memory", this->name(), ": ArenaOptions::limit_bytes = 0; set the hard wall on",
             " committed bytes (e.g. the device capacity)");
  }
  if (!(options_.compaction_slack >= 0.0 && options_.compaction_slack <= 1.0)) {
    TP_THROW(InvalidArgument, "memory", this->name(), ": ArenaOptions::compaction_slack = ", options_.compaction_slack,
             " is outside [0, 1]; give the share of the in-use bytes growth may leave free, e.g. 0.02");
  }
  if (options_.compact_before_growth && options_.share_granules) {
    TP_THROW(InvalidArgument, "memory", this->name(),
             ": ArenaOptions::compact_before_growth with share_granules: compaction moves blocks only in an arena"
             " whose physical granules are not shared; turn one of them off");
  }
  granularity_ = memory_->granularity();
  if (!is_power_of_two(granularity_) || granularity_ < kBlockAlignment) {
    TP_THROW(InvalidArgument, "memory", this->name(), ": the source ", memory_->name(), " has granularity ",
             granularity_, "; need a power of two >= ", kBlockAlignment);
  }
  if (options_.reserve_bytes > kMaxAllocationBytes) {
    TP_THROW(InvalidArgument, "memory", this->name(), ": ArenaOptions::reserve_bytes = ", options_.reserve_bytes,
             " is larger than any address space");
  }
  // Granules are indexed with 32 bits.
  const std::size_t max_range = granularity_ * (std::size_t{kNone} - 1);
  if (options_.reserve_bytes != 0) {
    range_bytes_ = round_up(std::min(options_.reserve_bytes, max_range), granularity_);
    base_ = static_cast<char*>(memory_->reserve(range_bytes_));
  } else {
    // Address space is cheap but not unlimited (ulimit -v, sanitizers): halve until the OS agrees.
    const std::size_t floor = round_up(std::min(options_.limit_bytes, kMaxDefaultReserve), granularity_);
    range_bytes_ = round_up(std::min(default_reserve(options_.limit_bytes), max_range), granularity_);
    while (base_ == nullptr) {
      try {
        base_ = static_cast<char*>(memory_->reserve(range_bytes_));
      } catch (const DeviceError&) {
        if (range_bytes_ / 2 < floor) throw;
        range_bytes_ = round_up(range_bytes_ / 2, granularity_);
      }
    }
  }
  if (options_.reuse_bytes != 0) kept_ring_.assign(kKeptRing, kNone);
  chunk_shift_ = static_cast<std::size_t>(std::countr_zero(granularity_ / kChunks));
  granule_shift_ = static_cast<std::size_t>(std::countr_zero(granularity_));
  stats_.bytes_limit = options_.limit_bytes;
}

ExpandableArena::~ExpandableArena() {
  std::lock_guard lock(mutex_);
  for (std::size_t granule = 0; granule < granules_.size(); ++granule) {
    if (granules_[granule].physical != kNone) memory_->unmap(base_ + granule * granularity_);
  }
  for (const Physical& physical : physicals_) {
    if (physical.committed) memory_->release_physical(physical.handle);
  }
  memory_->unreserve(base_, range_bytes_);
}

// ---- placement -----------------------------------------------------------------------------------------

ExpandableArena::Placement ExpandableArena::place(std::uint32_t block, std::size_t offset, std::size_t size) const {
  const std::size_t first = first_granule(offset);
  const std::size_t end = end_granule(offset, size);
  Placement placement{block, offset, 0, 0, true};
  if (!options_.share_granules) {
    placement.fresh_granules = exclusive_fresh_granules(first, end);
    placement.new_granules = placement.fresh_granules > cached_count_ ? placement.fresh_granules - cached_count_ : 0;
    return placement;
  }
  std::uint32_t taken = kNone;  // the first piece's physical granule, which the last piece may share
  std::uint64_t taken_mask = 0;
  for (std::size_t granule = first; granule < end; ++granule) {
    if (granule != first && granule != end - 1) {
      // Wholly covered by the free block or the growth: no in-use block touches it, and no other granule's
      // chunks leave room in a physical granule for all of it, so it takes a fresh one (cached or new).
      ++placement.fresh_granules;
      continue;
    }
    const std::uint64_t mask = piece_mask(granule, offset, offset + size);
    const Choice choice = choose(granule, mask, taken, taken_mask);
    if (choice.need == Need::invalid) return Placement{};
    if (choice.need == Need::claim || choice.need == Need::fresh) ++placement.fresh_granules;
    if (granule == first && choice.physical != kNone) {
      taken = choice.physical;
      taken_mask = mask;
    }
  }
  // Fresh pieces take cached physical granules first.
  placement.new_granules = placement.fresh_granules > cached_count_ ? placement.fresh_granules - cached_count_ : 0;
  return placement;
}

ExpandableArena::Placement ExpandableArena::place_in(std::uint32_t block, std::size_t size, std::size_t bound) const {
  const Block& free_block = nodes_[block];
  const Placement low = place(block, free_block.offset, size);
  if (free_block.size == size || (low.valid && low.fresh_granules <= bound)) return low;
  const Placement high = place(block, free_block.offset + free_block.size - size, size);
  return high.better_than(low) ? high : low;
}

ExpandableArena::Placement ExpandableArena::place_at_end(std::size_t size) const {
  if (size > range_bytes_ || extent_ > range_bytes_ - size) return Placement{};
  const Placement at_extent = place(kNone, extent_, size);
  if (!options_.share_granules || (at_extent.valid && at_extent.fresh_granules == 0) || extent_ % granularity_ == 0) {
    return at_extent;
  }
  // The extent's last granule may not take the head piece (its physical granule's other users overlap it),
  // or a fresh granule's bottom may share better: try the next granule boundary, leaving a free block.
  const std::size_t aligned = round_up(extent_, granularity_);
  if (aligned > range_bytes_ - size) return at_extent;
  const Placement at_boundary = place(kNone, aligned, size);
  return at_boundary.better_than(at_extent) ? at_boundary : at_extent;
}

ExpandableArena::Placement ExpandableArena::best_fit(std::size_t size) const {
  if (!options_.share_granules) return best_fit_exclusive(size);
  // The search stops at a placement no other can beat: one that reaches min_fresh_granules (later ones with as
  // few fresh granules have as many new ones, and better_than keeps the first).
  const std::size_t bound = min_fresh_granules(size);
  Placement best;
  std::size_t valid = 0;
  std::size_t examined = 0;
  for (std::uint32_t index = free_lower_bound(size);
       index != kNone && valid < kFitCandidates && examined < kMaxFitExamined; index = free_next(index), ++examined) {
    const Placement candidate = place_in(index, size, bound);
    if (!candidate.valid) continue;
    ++valid;
    if (candidate.better_than(best)) best = candidate;
    if (best.fresh_granules <= bound) return best;
  }
  const Placement at_end = place_at_end(size);
  if (!best.valid && at_end.valid && at_end.offset + size > range_bytes_ / 2) {
    // Free blocks whose chunks are lent to other granules hold nothing, and growing the extent past them
    // spends address space: beyond half the range, any free block that takes the request comes first.
    for (std::uint32_t index = free_lower_bound(size); index != kNone; index = free_next(index)) {
      const Placement candidate = place_in(index, size, bound);
      if (candidate.better_than(best)) best = candidate;
      if (best.valid && best.fresh_granules <= bound) break;
    }
    if (best.valid) return best;
  }
  return at_end.better_than(best) ? at_end : best;
}

// best_fit without sharing, where every placement is valid (place_at_end's aside): the same candidates in
// the same order and the same choice, with each end's fresh granules counted inline. The first loop of best_fit
// ends after kFitCandidates (<= kMaxFitExamined) blocks, and its second loop finds nothing (it runs only when
// no free block holds the request). The low end first, as in place_in (most requests stop there); then both
// ends are weighed without a branch on their counts (the high end wins only with fewer: when the block is the
// request's size, it cannot), and the best so far is kept by conditional moves.
ExpandableArena::Placement ExpandableArena::best_fit_exclusive(std::size_t size) const {
  static_assert(kFitCandidates <= kMaxFitExamined);
  // The search stops at a placement no other can beat: one that reaches min_fresh_granules. The best so far is
  // kept as (block, offset, fresh), fresh = kNoPlacement while there is none.
  constexpr std::size_t kNoPlacement = ~std::size_t{0};
  const std::size_t bound = min_fresh_granules(size);
  const auto placement = [this](std::uint32_t block, std::size_t offset, std::size_t fresh) {
    return Placement{block, offset, fresh > cached_count_ ? fresh - cached_count_ : 0, fresh, true};
  };
  std::uint32_t best_block = kNone;
  std::size_t best_offset = 0;
  std::size_t best_fresh = kNoPlacement;
  std::size_t examined = 0;
  for (std::uint32_t index = free_lower_bound(size); index != kNone && examined < kFitCandidates;
       index = free_next(index), ++examined) {
    const Block& hole = nodes_[index];
    const std::size_t low = hole.offset;
    const std::size_t low_fresh = fresh_granules_inside(low, size);
    if (low_fresh <= bound) return placement(index, low, low_fresh);  // then also fewer than the best so far
    const std::size_t high = hole.offset + hole.size - size;
    const std::size_t high_fresh = fresh_granules_inside(high, size);
    const std::size_t offset = high_fresh < low_fresh ? high : low;
    const std::size_t fresh = std::min(low_fresh, high_fresh);
    if (fresh <= bound) return placement(index, offset, fresh);
    const bool better = fresh < best_fresh;
    best_block = better ? index : best_block;
    best_offset = better ? offset : best_offset;
    best_fresh = better ? fresh : best_fresh;
  }
  // place_at_end without sharing: the extent's end, when the range has room, wins with fewer fresh granules.
  if (size <= range_bytes_ && extent_ <= range_bytes_ - size) {
    const std::size_t fresh = exclusive_fresh_granules(first_granule(extent_), end_granule(extent_, size));
    if (fresh < best_fresh) return placement(kNone, extent_, fresh);
  }
  return best_fresh != kNoPlacement ? placement(best_block, best_offset, best_fresh) : Placement{};
}

ExpandableArena::Placement ExpandableArena::fewest_commits(std::size_t size) const {
  Placement best = place_at_end(size);
  for (std::uint32_t index = free_lower_bound(size); index != kNone; index = free_next(index)) {
    if (best.valid && best.new_granules == 0) break;
    const Placement candidate = place_in(index, size, 0);
    if (candidate.valid && (!best.valid || candidate.new_granules < best.new_granules)) best = candidate;
  }
  return best;
}

// ---- blocks --------------------------------------------------------------------------------------------

std::uint32_t ExpandableArena::new_node() {
  if (spare_nodes_.empty()) {
    // A batch of nodes at a time (an eighth of those there are, at least kNodeBatch), so that the spare list
    // is seldom short and prepare_carve's top-up stays off the common path. Room for every node in the spare
    // list, so that free_node (on the noexcept free path) never allocates.
    const std::size_t count = nodes_.size();
    const std::size_t total = std::min<std::size_t>(count + std::max(kNodeBatch, count / 8), kNone);
    if (total == count) throw std::bad_alloc();                            // 32-bit node indices exhausted
    if (spare_nodes_.capacity() < total) spare_nodes_.reserve(2 * total);  // may throw: nothing changed yet
    nodes_.resize(total);                                                  // idem
    for (std::size_t index = total; index-- > count;) {                    // the lowest index on top
      nodes_[index].priority = treap_priority(static_cast<std::uint32_t>(index));
      spare_nodes_.push_back(static_cast<std::uint32_t>(index));
    }
  }
  const std::uint32_t index = spare_nodes_.back();
  spare_nodes_.pop_back();
  nodes_[index] = Block{.priority = nodes_[index].priority};
  return index;
}

void ExpandableArena::free_node(std::uint32_t index) noexcept { spare_nodes_.push_back(index); }

void ExpandableArena::link_before(std::uint32_t index, std::uint32_t at) noexcept {
  const std::uint32_t prev = nodes_[at].prev;
  nodes_[index].prev = prev;
  nodes_[index].next = at;
  nodes_[at].prev = index;
  if (prev != kNone) {
    nodes_[prev].next = index;
  } else {
    first_block_ = index;
  }
}

void ExpandableArena::link_after(std::uint32_t index, std::uint32_t at) noexcept {
  const std::uint32_t next = nodes_[at].next;
  nodes_[index].prev = at;
  nodes_[index].next = next;
  nodes_[at].next = index;
  if (next != kNone) {
    nodes_[next].prev = index;
  } else {
    last_block_ = index;
  }
}

void ExpandableArena::unlink(std::uint32_t index) noexcept {
  const std::uint32_t prev = nodes_[index].prev;
  const std::uint32_t next = nodes_[index].next;
  if (prev != kNone) {
    nodes_[prev].next = next;
  } else {
    first_block_ = next;
  }
  if (next != kNone) {
    nodes_[next].prev = prev;
  } else {
    last_block_ = prev;
  }
  free_node(index);
}

// prepare_carve(placement, size) ran since the last change: nothing here allocates or throws.
std::uint32_t ExpandableArena::carve(const Placement& placement, std::size_t size) {
  if (placement.block == kNone) {      // grow the extent; the tail block is never free
    if (placement.offset > extent_) {  // a free block up to the granule boundary (the tail was in use)
      const std::uint32_t gap = new_node();
      nodes_[gap].offset = extent_;
      nodes_[gap].size = placement.offset - extent_;
      link_after(gap, last_block_);
      insert_free(gap);
      extent_ = placement.offset;
    }
    const std::uint32_t index = new_node();
    nodes_[index].offset = extent_;
    nodes_[index].size = size;
    if (last_block_ != kNone) {
      link_after(index, last_block_);
    } else {
      first_block_ = last_block_ = index;
    }
    extent_ += size;
    return index;
  }
  const std::uint32_t hole = placement.block;
  if (nodes_[hole].size == size) {
    erase_free(hole);
    return hole;
  }
  // The hole stays free with what is left ([taken | rest] or [rest | taken]); the taken block is a new node.
  const std::uint32_t taken = new_node();  // from the spare list (prepare_carve)
  nodes_[taken].offset = placement.offset;
  nodes_[taken].size = size;
  const bool low_end = placement.offset == nodes_[hole].offset;
  if (low_end) {
    link_before(taken, hole);
  } else {
    link_after(taken, hole);
  }
  rekey_free(hole, low_end ? nodes_[hole].offset + size : nodes_[hole].offset, nodes_[hole].size - size);
  return taken;
}

// Which neighbours are free is as random as the frees: the neighbours are read unconditionally and the merged
// block's start and size selected by masks (the compiler branches on a conditional here), leaving the branches
// on the case alone.
void ExpandableArena::release_block(std::uint32_t index) {
  Block& block = nodes_[index];
  block.in_use = false;
  block.requested = 0;
  const std::uint32_t prev = block.prev;
  const std::uint32_t next = block.next;
  const Block& before = nodes_[prev != kNone ? prev : index];  // the block itself stands in for no neighbour
  const bool prev_free = (prev != kNone) & !before.in_use;
  const std::size_t prev_mask = std::size_t{0} - static_cast<std::size_t>(prev_free);  // all ones when free
  const std::size_t offset = block.offset + ((before.offset - block.offset) & prev_mask);
  if (next == kNone) [[unlikely]] {  // the tail, with a free block before it, is cut off: the extent shrinks
    unlink(index);
    if (prev_free) {
      erase_free(prev);
      unlink(prev);
    }
    extent_ = offset;
    return;
  }
  const Block& after = nodes_[next];
  const bool next_free = !after.in_use;
  // One branch per case, on their sum (the compiler splits a test of two flags into two branches).
  const unsigned free_neighbours = static_cast<unsigned>(prev_free) + 2 * static_cast<unsigned>(next_free);
  if (free_neighbours == 0) {
    insert_free(index);
    return;
  }
  // Merge into a free neighbour already in the index: prev (keeping its start), else next (taking ours).
  const std::size_t next_mask = std::size_t{0} - static_cast<std::size_t>(next_free);
  const std::size_t size = block.size + (before.size & prev_mask) + (after.size & next_mask);
  const std::uint32_t merged = next ^ ((prev ^ next) & static_cast<std::uint32_t>(prev_mask));
  if (free_neighbours == 3) {
    erase_free(next);
    unlink(next);
  }
  unlink(index);
  rekey_free(merged, offset, size);
}

// ---- allocate / deallocate ---------------------------------------------------------------------------

void* ExpandableArena::do_allocate(std::size_t bytes, std::size_t /*alignment*/, const AllocationTag& tag) {
  const std::size_t size = round_up(bytes, kBlockAlignment);
  std::lock_guard lock(mutex_);
  ++events_;
  // Strong exception safety: prepare_carve reserves what carve needs before acquire_for maps anything, and
  // nothing from the commit to the return allocates or throws.
  if (kept_blocks_ != 0) {
    reserve_slots(in_use_count_ + 1);  // may throw: nothing changed yet
    if (const std::uint32_t kept = take_kept(size); kept != kNone) {
      Block& block = nodes_[kept];
      block.requested = bytes;
      insert_slot(block.offset, kept);
      ++in_use_count_;
      stats_.record_allocation(bytes, size, 0);
      last_compaction_.reset();
      decay_cached();
      return base_ + block.offset;
    }
  }
  Placement placement = best_fit(size);
  // Kept blocks never make the arena commit, and may be what keeps the request from a better place: give them
  // back and place it again.
  if (kept_blocks_ != 0 && placement.valid &&
      (placement.new_granules != 0 || (placement.fresh_granules > min_fresh_granules(size) && kept_bytes_ >= size)) &&
      flush_kept()) {
    placement = best_fit(size);
  }
  if (relieves_growth_ && placement.valid && placement.new_granules != 0) [[unlikely]] {
    placement = relieve_growth_pressure(size, placement);
  }
  if (placement.valid) prepare_carve(placement, size);
  if (!placement.valid || !acquire_for(placement, size)) {
    // Give every kept block and cached granule back and place the request where it commits the least, then
    // retry once.
    flush_kept();
    decommit_cached(0);
    placement = fewest_commits(size);
    if (!placement.valid) {
      throw_out_of_memory(bytes, size, tag,
                          "the reserved virtual range of " + format_bytes(range_bytes_) +
                              " has no room left (set ArenaOptions::reserve_bytes larger)");
    }
    prepare_carve(placement, size);
    if (!acquire_for(placement, size)) {
      throw_out_of_memory(bytes, size, tag,
                          "committing " + std::to_string(placement.new_granules) + " more granule(s) of " +
                              format_bytes(granularity_) + " would cross the limit or the capacity of " +
                              memory_->name() + "; every wholly free granule was already decommitted");
    }
    ++stats_.num_retries;  // served only after the cache was given back
  }
  const std::uint32_t index = carve(placement, size);
  Block& block = nodes_[index];
  block.in_use = true;
  block.requested = bytes;
  insert_slot(block.offset, index);
  ++in_use_count_;

  stats_.record_allocation(bytes, size, 0);  // committed granules count as reserved in acquire_for
  last_compaction_.reset();
  decay_cached();
  return base_ + block.offset;
}

std::uint32_t ExpandableArena::block_at(std::size_t offset) const noexcept {
  const std::size_t position = slot_buckets_.empty() ? kNoSlot : find_slot(offset);
  return position != kNoSlot ? slot_buckets_[position / kSlotsPerBucket].indices[position % kSlotsPerBucket] : kNone;
}

void ExpandableArena::erase_slot(std::size_t position) noexcept {
  const std::size_t bucket = position / kSlotsPerBucket;
  const std::size_t lane = position % kSlotsPerBucket;
  // The buckets the entry passed on its way from its home no longer have it past them.
  const std::size_t mask = slot_buckets_.size() - 1;
  for (std::size_t at = slot_home(slot_buckets_[bucket].offsets[lane]); at != bucket; at = (at + 1) & mask) {
    --slot_buckets_[at].passed;
  }
  slot_buckets_[bucket].offsets[lane] = kEmptySlot;
  slot_buckets_[bucket].indices[lane] = kNone;
  --slots_in_use_;
}

void ExpandableArena::set_slot(std::size_t offset, std::uint32_t index) noexcept {
  const std::size_t position = slot_buckets_.empty() ? kNoSlot : find_slot(offset);
  if (index == kNone) {
    if (position != kNoSlot) erase_slot(position);
  } else if (position != kNoSlot) {
    slot_buckets_[position / kSlotsPerBucket].indices[position % kSlotsPerBucket] = index;
  } else {
    insert_slot(offset, index);
  }
}

void ExpandableArena::grow_slots(std::size_t blocks) {
  const std::size_t lanes = kSlotsPerBlock * blocks;
  const std::size_t buckets = std::max<std::size_t>(16, std::bit_ceil((lanes + kSlotsPerBucket - 1) / kSlotsPerBucket));
  std::vector<SlotBucket> table(buckets);  // may throw: nothing changed yet
  table.swap(slot_buckets_);
  slot_shift_ = 64 - static_cast<unsigned>(std::countr_zero(buckets));
  slots_in_use_ = 0;
  for (const SlotBucket& bucket : table) {
    for (std::size_t lane = 0; lane < kSlotsPerBucket; ++lane) {
      if (bucket.offsets[lane] != kEmptySlot) insert_slot(bucket.offsets[lane], bucket.indices[lane]);
    }
  }
}

std::size_t ExpandableArena::do_allocated_size(const void* ptr, std::size_t bytes) const noexcept {
  std::lock_guard lock(mutex_);
  const auto address = static_cast<const char*>(ptr);
  if (address < base_ || address >= base_ + extent_) return bytes;
  const auto offset = static_cast<std::size_t>(address - base_);
  if (offset % kBlockAlignment != 0) return bytes;
  const std::uint32_t index = block_at(offset);
  return index != kNone && nodes_[index].in_use ? nodes_[index].size : bytes;
}

void ExpandableArena::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  const auto address = static_cast<char*>(ptr);
  const std::size_t offset =
      address >= base_ && address < base_ + extent_ ? static_cast<std::size_t>(address - base_) : extent_;
  // Inside the extent there is a block, so the table is not empty.
  const std::size_t slot = offset % kBlockAlignment == 0 && offset < extent_ ? find_slot(offset) : kNoSlot;
  if (slot == kNoSlot) [[unlikely]] {
    // Fatal lines print whatever the level, formatted without allocating while the arena's lock is held.
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s: deallocate(%p, %zu) of a pointer this arena did not hand out (or freed twice); aborting",
                  name().c_str(), ptr, bytes);
    log::write_always(log::Level::error, "memory", line);
    std::abort();
  }
  const std::uint32_t index = slot_buckets_[slot / kSlotsPerBucket].indices[slot % kSlotsPerBucket];
  if (nodes_[index].requested != bytes) [[unlikely]] {
    char line[512];
    std::snprintf(line, sizeof line, "%s: deallocate(%p, %zu) but the block was allocated with %zu bytes; aborting",
                  name().c_str(), ptr, bytes, nodes_[index].requested);
    log::write_always(log::Level::error, "memory", line);
    std::abort();
  }
  ++events_;
  erase_slot(slot);
  --in_use_count_;
  const std::size_t size = nodes_[index].size;
  stats_.record_free(nodes_[index].requested, size, 0);
  if (options_.reuse_bytes != 0 && pause_left_ == 0 && size <= options_.reuse_max_block &&
      size <= options_.reuse_bytes) {
    keep_block(index);
  } else {
    pause_left_ -= static_cast<std::uint64_t>(pause_left_ != 0);
    release_granules(index);
    release_block(index);
  }
  decay_cached();
}

std::size_t ExpandableArena::do_trim() {
  std::lock_guard lock(mutex_);
  flush_kept();
  return decommit_cached(0);
}

void ExpandableArena::do_reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
}

void ExpandableArena::throw_out_of_memory(std::size_t requested, std::size_t rounded, const AllocationTag& tag,
                                          const std::string& detail) {
  ++stats_.num_ooms;
  const std::size_t pinned = committed_granules_ * granularity_;
  auto report = OutOfMemoryReport::for_request(name(), requested, rounded, tag, options_.limit_bytes,
                                               stats_.bytes_in_use, pinned);
  // As stats() reports it (fragmentation.hpp); what the limit leaves beyond `pinned` is the report's
  // limit - reserved.
  report.largest_free_block = largest_committed_free_block();
  report.compaction = last_compaction_;
  report.detail = name() + ": " + detail + " (" + std::to_string(committed_granules_) + " granules committed, " +
                  std::to_string(in_use_count_) + " blocks in use)";
  throw OutOfMemoryError(std::move(report));
}

}  // namespace tp::memory

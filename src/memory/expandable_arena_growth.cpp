// SPDX-License-Identifier: Apache-2.0
// ExpandableArena: reclaim before growing (the header's "Reclaim before growing", growth_pressure.hpp). Only
// do_allocate's growth branch reaches this file: a request whose best placement must create physical granules.
#include <utility>

#include "tensorpool/memory/expandable_arena.hpp"

namespace tp::memory {

void ExpandableArena::set_growth_hook(GrowthHook hook) {
  std::lock_guard lock(mutex_);
  growth_hook_ = std::move(hook);
  relieves_growth_ = static_cast<bool>(growth_hook_) || (options_.compact_before_growth && relocator_ != nullptr);
}

void ExpandableArena::set_relocator(Relocator* relocator) {
  std::lock_guard lock(mutex_);
  relocator_ = relocator;
  relieves_growth_ = static_cast<bool>(growth_hook_) || (options_.compact_before_growth && relocator_ != nullptr);
}

GrowthPressureStats ExpandableArena::growth_pressure_stats() const {
  std::lock_guard lock(mutex_);
  return growth_;
}

// Growing to take `placement` would leave committed - in use (after the request) above the slack: compaction
// may give the holes back. And, when `repeat_guard` (sliding, which copies nearly the live set), either the
// limit would refuse the growth, or the holes grew by more than a granule since the last sliding compaction
// left them (hysteresis: a slide that could not close them is not repeated on every request that grows).
bool ExpandableArena::compaction_pays(std::size_t size, const Placement& placement, bool repeat_guard) const noexcept {
  const std::size_t committed = committed_granules_ * granularity_;
  const std::size_t in_use = stats_.bytes_in_use;
  const std::size_t free_inside = committed > in_use ? committed - in_use : 0;
  if (free_inside < granularity_) return false;  // nothing compaction could give back
  const std::size_t grown = committed + placement.new_granules * granularity_;
  if (grown > options_.limit_bytes) return true;
  const std::size_t live = in_use + size;
  const auto allowed = static_cast<std::size_t>(options_.compaction_slack * static_cast<double>(live)) + granularity_;
  if (grown <= live + allowed) return false;
  return !repeat_guard || free_inside > residual_free_ + granularity_;
}

ExpandableArena::Placement ExpandableArena::relieve_growth_pressure(std::size_t size, Placement placement) {
  // No kept block is left here: do_allocate gave them back before a placement that commits.
  ++growth_.growth_requests;
  // Only growth past the peak raises the footprint: below it (granules the decay gave back and a later step
  // takes again) the layers above keep their blocks, so a steady loop does not take them back. With compaction
  // before growth they go back on every growth: a kept block cannot move, and the holes it pins are what
  // compaction closes.
  const bool compacts = options_.compact_before_growth && relocator_ != nullptr;
  const bool past_peak = (committed_granules_ + placement.new_granules) * granularity_ > stats_.peak_bytes_reserved;
  if (growth_hook_ && (past_peak || compacts)) {
    // The hook frees into this arena: it runs unlocked, and the request is placed again from what it left.
    ++growth_.hooks_run;
    mutex_.unlock();
    bool released = false;
    try {
      released = growth_hook_();
    } catch (...) {
      mutex_.lock();  // the caller's guard unlocks it again
      throw;
    }
    mutex_.lock();
    if (released) ++growth_.hooks_released;
    flush_kept();  // what the hook freed into this arena may have been kept
    placement = best_fit(size);
    if (!placement.valid || placement.new_granules == 0) {
      if (placement.valid) ++growth_.growth_avoided;
      return placement;
    }
  }
  if (!compacts || !compaction_pays(size, placement, false)) return placement;
  const auto record = [this](const CompactionResult& result, bool evacuated) {
    if (result.blocks_moved == 0) return;  // nothing could move: no compaction ran
    count_compaction(result);
    ++growth_.compactions;
    if (evacuated) ++growth_.evacuations;
    growth_.blocks_moved += result.blocks_moved;
    growth_.bytes_copied += result.bytes_copied;
    growth_.bytes_remapped += result.bytes_remapped;
    growth_.granules_freed += result.granules_freed;
  };
  const auto settle = [this, size]() {
    const std::size_t committed = committed_granules_ * granularity_;
    residual_free_ = committed > stats_.bytes_in_use ? committed - stats_.bytes_in_use : 0;
    Placement settled = best_fit(size);
    if (settled.valid && settled.new_granules == 0) ++growth_.growth_avoided;
    return settled;
  };
  // Evacuation first: it copies only the blocks pinning the emptiest granules, where sliding copies everything
  // above its start. It runs on every growth the slack refuses; sliding, when evacuation could not free enough,
  // only once the holes grew by a granule past what the last slide left (compaction_pays' repeat guard).
  record(compact_evacuating(*relocator_, size), true);
  placement = best_fit(size);
  if (placement.valid && placement.new_granules == 0) {
    ++growth_.growth_avoided;
    return placement;
  }
  if (!placement.valid || !compaction_pays(size, placement, true)) return placement;
  // Gather enough free bytes at the end that, once cut off, growing leaves half the slack free inside.
  const std::size_t live = stats_.bytes_in_use + size;
  const std::size_t grown = (committed_granules_ + placement.new_granules) * granularity_;
  const std::size_t keep = static_cast<std::size_t>(options_.compaction_slack * static_cast<double>(live)) / 2;
  const std::size_t gather = grown > live + keep ? grown - live - keep + granularity_ : granularity_;
  record(compact_sliding(*relocator_, gather), false);
  return settle();
}

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
// ExpandableArena: exact-size reuse (the header's "Exact-size reuse", ArenaOptions::reuse_bytes). Every function
// here runs with the arena's lock held but reuse_stats().
#include "tensorpool/memory/expandable_arena.hpp"

namespace tp::memory {

ReuseStats ExpandableArena::reuse_stats() const {
  std::lock_guard lock(mutex_);
  ReuseStats stats = reuse_;
  stats.kept_blocks = kept_blocks_;
  stats.kept_bytes = kept_bytes_;
  stats.paused = pause_left_ != 0;
  return stats;
}

void ExpandableArena::keep_block(std::uint32_t index) noexcept {
  Block& block = nodes_[index];
  block.requested = 0;
  block.kept = true;
  const std::size_t bin = bin_of(block.size);
  block.left = kNone;
  block.right = kept_heads_[bin];
  if (block.right != kNone) nodes_[block.right].left = index;
  kept_heads_[bin] = index;
  kept_bytes_ += block.size;
  ++kept_blocks_;
  ++reuse_.keeps;
  // The oldest go back while the kept blocks hold too much or the ring is full (an entry whose block was taken
  // again, or given back, is only dropped).
  while (kept_entries_ != 0 && (kept_bytes_ > options_.reuse_bytes || kept_entries_ == kept_ring_.size())) {
    const std::uint32_t oldest = kept_ring_[kept_front_];
    kept_front_ = (kept_front_ + 1) % kept_ring_.size();
    --kept_entries_;
    if (nodes_[oldest].kept && oldest != index) release_kept(oldest);
  }
  kept_ring_[(kept_front_ + kept_entries_) % kept_ring_.size()] = index;
  ++kept_entries_;
  // A round with too few hits pauses keeping: the sizes do not repeat, and every kept block would cost a flush.
  if (++round_keeps_ == kReuseRound) {
    if (round_hits_ * kReuseMinHitShare < round_keeps_) {
      pause_left_ = kReusePause;
      ++reuse_.pauses;
      flush_kept();
    }
    round_keeps_ = 0;
    round_hits_ = 0;
  }
}

void ExpandableArena::release_kept(std::uint32_t index) noexcept {
  unlist_kept(index);
  nodes_[index].requested = 0;
  release_granules(index);
  release_block(index);
}

bool ExpandableArena::flush_kept() noexcept {
  if (kept_blocks_ == 0) return false;
  while (kept_entries_ != 0) {
    const std::uint32_t oldest = kept_ring_[kept_front_];
    kept_front_ = (kept_front_ + 1) % kept_ring_.size();
    --kept_entries_;
    if (nodes_[oldest].kept) release_kept(oldest);
  }
  ++reuse_.flushes;
  return true;
}

}  // namespace tp::memory

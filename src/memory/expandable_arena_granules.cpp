// SPDX-License-Identifier: Apache-2.0
// ExpandableArena: granule bookkeeping (commit on demand, per-granule user counts, the cache of wholly free
// granules and the release policy). The caller holds mutex_.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {

// ---- granules ------------------------------------------------------------------------------------------

// `placement` counted the uncommitted granules it touches (new_granules); nothing has changed since. Throws
// only before the first commit (growing the granule table) or, rethrowing after undoing its commits, when the
// source throws something other than OutOfMemoryError.
bool ExpandableArena::commit_for(const Placement& placement, std::size_t size) {
  const std::size_t needed = placement.new_granules;
  if (needed == 0) return true;  // every granule it touches is committed, hence in granules_
  const std::size_t first = first_granule(placement.offset);
  const std::size_t end = end_granule(placement.offset, size);
  if (granules_.size() < end) granules_.resize(end);
  // decommit_oldest (on the noexcept free path) collects at most one entry per granule.
  if (decommit_scratch_.capacity() < granules_.size()) decommit_scratch_.reserve(granules_.capacity());
  // Committed bytes rise above their high-water mark only for granules in use: cached granules elsewhere
  // are given back first, so caching never raises the peak.
  if (committed_granules_ + needed > high_water_granules_) {
    decommit_oldest(committed_granules_ + needed - high_water_granules_, first, end);
  }
  const std::size_t limit_granules = options_.limit_bytes / granularity_;
  if (committed_granules_ > limit_granules || needed > limit_granules - committed_granules_) return false;

  // Runs of uncommitted granules, committed one call each; on a refusal the earlier runs are undone. Those
  // are the granules of [first, granule) committed with no users and off the cached list: before this call
  // every committed granule without users was cached.
  const auto undo = [this, first](std::size_t stop) noexcept {
    for (std::size_t index = first; index < stop;) {
      const auto fresh = [this](std::size_t at) {
        return granules_[at].committed && granules_[at].users == 0 && !granules_[at].cached;
      };
      if (!fresh(index)) {
        ++index;
        continue;
      }
      std::size_t run_end = index;
      while (run_end < stop && fresh(run_end)) ++run_end;
      decommit_run(index, run_end - index);
      index = run_end;
    }
    stats_.bytes_reserved = committed_granules_ * granularity_;
  };
  std::size_t granule = first;
  while (granule < end) {
    if (granules_[granule].committed) {
      ++granule;
      continue;
    }
    std::size_t run_end = granule;
    while (run_end < end && !granules_[run_end].committed) ++run_end;
    try {
      memory_->commit(base_ + granule * granularity_, (run_end - granule) * granularity_);
    } catch (const OutOfMemoryError&) {
      undo(granule);
      return false;
    } catch (...) {
      undo(granule);
      throw;
    }
    ++stats_.upstream_allocs;
    for (std::size_t marked = granule; marked < run_end; ++marked) granules_[marked].committed = true;
    committed_granules_ += run_end - granule;
    granule = run_end;
  }
  high_water_granules_ = std::max(high_water_granules_, committed_granules_);
  stats_.bytes_reserved = committed_granules_ * granularity_;
  stats_.update_peaks();
  return true;
}

void ExpandableArena::lru_push_newest(std::size_t index) noexcept {
  Granule& granule = granules_[index];
  granule.cached = true;
  granule.older = lru_newest_;
  granule.newer = kNone;
  if (lru_newest_ != kNone) {
    granules_[lru_newest_].newer = static_cast<std::uint32_t>(index);
  } else {
    lru_oldest_ = static_cast<std::uint32_t>(index);
  }
  lru_newest_ = static_cast<std::uint32_t>(index);
  ++cached_count_;
}

void ExpandableArena::lru_remove(std::size_t index) noexcept {
  Granule& granule = granules_[index];
  if (granule.older != kNone) {
    granules_[granule.older].newer = granule.newer;
  } else {
    lru_oldest_ = granule.newer;
  }
  if (granule.newer != kNone) {
    granules_[granule.newer].older = granule.older;
  } else {
    lru_newest_ = granule.older;
  }
  granule.cached = false;
  granule.older = kNone;
  granule.newer = kNone;
  --cached_count_;
}

void ExpandableArena::acquire_granules(std::size_t offset, std::size_t size) {
  const std::size_t end = end_granule(offset, size);
  for (std::size_t index = first_granule(offset); index < end; ++index) {
    if (granules_[index].users++ == 0 && granules_[index].cached) lru_remove(index);
  }
}

void ExpandableArena::release_granules(std::size_t offset, std::size_t size) {
  // Highest first, so a block's low granules (where best fit places the next request) are the newest.
  const std::size_t first = first_granule(offset);
  for (std::size_t index = end_granule(offset, size); index-- > first;) {
    if (--granules_[index].users == 0) lru_push_newest(index);
  }
}

void ExpandableArena::decommit_run(std::size_t first, std::size_t count) noexcept {
  for (std::size_t index = first; index < first + count; ++index) granules_[index].committed = false;
  memory_->decommit(base_ + first * granularity_, count * granularity_);
  committed_granules_ -= count;
  ++stats_.upstream_frees;
}

std::size_t ExpandableArena::decommit_cached(std::size_t keep_bytes) noexcept {
  const std::size_t keep = keep_bytes / granularity_;
  if (cached_count_ <= keep) return 0;
  return decommit_oldest(cached_count_ - keep, 0, 0);
}

std::size_t ExpandableArena::decommit_oldest(std::size_t count, std::size_t skip_first, std::size_t skip_end) noexcept {
  // No allocation: decommit_scratch_ has room for every granule (commit_for reserves it as granules_ grows),
  // and std::sort works in place.
  std::vector<std::uint32_t>& victims = decommit_scratch_;
  victims.clear();
  std::uint32_t index = lru_oldest_;
  while (victims.size() < count && index != kNone) {
    const std::uint32_t newer = granules_[index].newer;
    if (index < skip_first || index >= skip_end) {
      lru_remove(index);
      victims.push_back(index);
    }
    index = newer;
  }
  std::sort(victims.begin(), victims.end());
  for (std::size_t first = 0; first < victims.size();) {
    std::size_t last = first + 1;
    while (last < victims.size() && victims[last] == victims[last - 1] + 1) ++last;
    decommit_run(victims[first], last - first);
    first = last;
  }
  const std::size_t released = victims.size() * granularity_;
  victims.clear();
  stats_.bytes_reserved = committed_granules_ * granularity_;
  return released;
}

}  // namespace tp::memory

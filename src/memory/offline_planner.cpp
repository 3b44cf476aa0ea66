// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/offline_planner.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <tuple>
#include <utility>

#include "tensorpool/core/error.hpp"

namespace tp::memory {
namespace {

enum class Order { size, lifetime };
enum class Fit { best, first };

// Placed intervals bucketed by time block, so a query only looks at buffers near it in time.
// Invariant: a placed interval is listed in every block its [start, end) touches.
class TimeIndex {
 public:
  TimeIndex(std::size_t horizon, std::size_t intervals) : stamps_(intervals, 0) {
    constexpr std::size_t kBlocks = 256;
    block_length_ = std::max<std::size_t>(1, (horizon + kBlocks - 1) / kBlocks);
    blocks_.resize(horizon / block_length_ + 1);
  }

  void add(std::size_t id, const LiveInterval& interval) {
    for (std::size_t block = first_block(interval); block <= last_block(interval); ++block)
      blocks_[block].push_back(id);
  }

  // Calls visit(id) once for each placed interval that overlaps `interval` in time.
  template <typename Visit>
  void for_each_overlapping(const LiveInterval& interval, std::span<const LiveInterval> all, Visit&& visit) {
    ++stamp_;
    for (std::size_t block = first_block(interval); block <= last_block(interval); ++block) {
      for (const std::size_t id : blocks_[block]) {
        if (stamps_[id] == stamp_) continue;
        stamps_[id] = stamp_;
        if (all[id].start < interval.end && interval.start < all[id].end) visit(id);
      }
    }
  }

 private:
  std::size_t first_block(const LiveInterval& interval) const { return interval.start / block_length_; }
  std::size_t last_block(const LiveInterval& interval) const { return (interval.end - 1) / block_length_; }

  std::size_t block_length_ = 1;
  std::vector<std::vector<std::size_t>> blocks_;
  std::vector<std::uint64_t> stamps_;  // per interval: the query that last visited it
  std::uint64_t stamp_ = 0;
};

OfflinePlan place(std::span<const LiveInterval> intervals, Order order, Fit fit) {
  std::vector<std::size_t> sequence(intervals.size());
  std::iota(sequence.begin(), sequence.end(), std::size_t{0});
  auto lifetime = [&](std::size_t id) { return intervals[id].end - intervals[id].start; };
  std::stable_sort(sequence.begin(), sequence.end(), [&](std::size_t a, std::size_t b) {
    if (order == Order::size) {
      if (intervals[a].bytes != intervals[b].bytes) return intervals[a].bytes > intervals[b].bytes;
      return lifetime(a) > lifetime(b);
    }
    if (lifetime(a) != lifetime(b)) return lifetime(a) > lifetime(b);
    return intervals[a].bytes > intervals[b].bytes;
  });

  std::size_t horizon = 0;
  for (const LiveInterval& interval : intervals) horizon = std::max(horizon, interval.end);
  TimeIndex index(horizon, intervals.size());
  OfflinePlan plan;
  plan.offsets.assign(intervals.size(), 0);
  std::vector<std::pair<std::size_t, std::size_t>> neighbours;  // (offset, bytes) of overlapping placed ones
  for (const std::size_t id : sequence) {
    const LiveInterval& interval = intervals[id];
    neighbours.clear();
    index.for_each_overlapping(interval, intervals, [&](std::size_t other) {
      neighbours.emplace_back(plan.offsets[other], intervals[other].bytes);
    });
    std::sort(neighbours.begin(), neighbours.end());
    std::size_t cursor = 0;  // end of the memory used by the neighbours seen so far
    std::size_t chosen = 0;
    std::size_t chosen_gap = 0;
    bool found = false;
    for (const auto& [offset, bytes] : neighbours) {
      if (offset > cursor) {
        const std::size_t gap = offset - cursor;
        if (gap >= interval.bytes && (!found || (fit == Fit::best && gap < chosen_gap))) {
          chosen = cursor;
          chosen_gap = gap;
          found = true;
        }
      }
      cursor = std::max(cursor, offset + bytes);
    }
    plan.offsets[id] = found ? chosen : cursor;
    plan.heap_bytes = std::max(plan.heap_bytes, plan.offsets[id] + interval.bytes);
    index.add(id, interval);
  }
  plan.strategy =
      std::string(order == Order::size ? "size" : "lifetime") + (fit == Fit::best ? "/best-fit" : "/first-fit");
  return plan;
}

}  // namespace

std::vector<LiveInterval> live_intervals(const Trace& trace) {
  std::vector<LiveInterval> intervals;
  intervals.reserve(trace.allocation_count());
  for (std::size_t index = 0; index < trace.size(); ++index) {
    const TraceEvent& event = trace.events()[index];
    if (event.action != TraceAction::allocate) continue;
    const std::size_t free = trace.partner(index);
    intervals.push_back(LiveInterval{index, free == kNoEvent ? trace.size() : free, event.size});
  }
  return intervals;
}

std::size_t live_bytes_lower_bound(std::span<const LiveInterval> intervals) {
  // (time, is_start, bytes): at equal times ends (false) sort before starts.
  std::vector<std::tuple<std::size_t, bool, std::size_t>> changes;
  changes.reserve(2 * intervals.size());
  for (const LiveInterval& interval : intervals) {
    changes.emplace_back(interval.start, true, interval.bytes);
    changes.emplace_back(interval.end, false, interval.bytes);
  }
  std::sort(changes.begin(), changes.end());
  std::size_t live = 0;
  std::size_t peak = 0;
  for (const auto& [time, is_start, bytes] : changes) {
    if (is_start) {
      live += bytes;
      peak = std::max(peak, live);
    } else {
      live -= bytes;
    }
  }
  return peak;
}

OfflinePlan plan_offsets(std::span<const LiveInterval> intervals) {
  for (std::size_t id = 0; id < intervals.size(); ++id) {
    if (intervals[id].end <= intervals[id].start) {
      TP_THROW(InvalidArgument, "planner", "interval ", id, " is [", intervals[id].start, ", ", intervals[id].end,
               "); a live interval needs end > start");
    }
  }
  OfflinePlan best;
  bool first = true;
  for (const Order order : {Order::size, Order::lifetime}) {
    for (const Fit fit : {Fit::best, Fit::first}) {
      OfflinePlan plan = place(intervals, order, fit);
      if (first || plan.heap_bytes < best.heap_bytes) best = std::move(plan);
      first = false;
    }
  }
  best.lower_bound_bytes = live_bytes_lower_bound(intervals);
  return best;
}

OfflinePlan plan_offline(const Trace& trace) { return plan_offsets(live_intervals(trace)); }

}  // namespace tp::memory

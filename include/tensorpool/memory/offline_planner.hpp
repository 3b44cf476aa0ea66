// SPDX-License-Identifier: Apache-2.0
#pragma once
// Offline planner: given every buffer's size and live interval up front (a whole trace, or a graph's
// schedule), assign each an offset in one heap so that buffers live at the same time never overlap in
// memory, as XLA's heap simulator (GlobalDecreasingSizeBestFitHeap) does. The heap it finds is what an
// allocator with perfect knowledge of the future could get away with; the lower bound (the peak of live
// bytes) is what no placement can beat.
//
// Algorithm: buffers are placed one at a time in a given order; each goes into the gap between the buffers
// already placed that overlap it in time, chosen by best fit (the smallest gap that holds it, lowest offset
// on ties) or first fit (the lowest), and on top of them when no gap holds it. Four plans are made (orders:
// decreasing size, decreasing lifetime; fits: best, first) and the one with the smallest heap is kept.
// Invariant of a plan: heap_bytes >= lower_bound_bytes, and two buffers whose intervals overlap occupy
// disjoint [offset, offset + bytes) ranges inside [0, heap_bytes).

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "tensorpool/memory/trace.hpp"

namespace tp::memory {

// A buffer of `bytes` live during [start, end) of some discrete clock (event indices for a trace).
struct LiveInterval {
  std::size_t start = 0;
  std::size_t end = 0;  // > start
  std::size_t bytes = 0;
};

struct OfflinePlan {
  std::size_t heap_bytes = 0;
  std::size_t lower_bound_bytes = 0;  // max over time of the sum of live bytes
  std::vector<std::size_t> offsets;   // one per interval, in input order
  std::string strategy;               // the plan kept, e.g. "size/best-fit"
};

// One interval per allocation of the trace: [allocate index, free index), or to trace.size() when the
// trace never frees it. In the order of the allocations.
[[nodiscard]] std::vector<LiveInterval> live_intervals(const Trace& trace);

// Max over time of the sum of bytes of live intervals (an interval ending at t and one starting at t do not
// overlap).
[[nodiscard]] std::size_t live_bytes_lower_bound(std::span<const LiveInterval> intervals);

// Throws tp::InvalidArgument for an interval with end <= start.
[[nodiscard]] OfflinePlan plan_offsets(std::span<const LiveInterval> intervals);
[[nodiscard]] OfflinePlan plan_offline(const Trace& trace);

}  // namespace tp::memory

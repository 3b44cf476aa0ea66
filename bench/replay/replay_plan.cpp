// SPDX-License-Identifier: Apache-2.0
#include "replay_plan.hpp"

#include <limits>

#include "tensorpool/core/error.hpp"

namespace tp::bench {

ReplayPlan compile_plan(const memory::Trace& trace) {
  ReplayPlan plan;
  plan.peak_live_bytes = trace.peak_live_bytes();
  plan.ops.reserve(trace.size());
  const auto& events = trace.events();
  // Slot of each allocate event, by event index; frees find theirs through Trace::partner().
  std::vector<std::uint32_t> slot_of(events.size(), 0);
  std::vector<std::uint32_t> free_slots;
  for (std::size_t index = 0; index < events.size(); ++index) {
    const memory::TraceEvent& event = events[index];
    if (event.action == memory::TraceAction::allocate) {
      std::uint32_t slot = 0;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        if (plan.slot_count >= std::numeric_limits<std::uint32_t>::max()) {
          TP_THROW(InvalidArgument, "bench", trace.source(), ": too many live allocations");
        }
        slot = static_cast<std::uint32_t>(plan.slot_count++);
      }
      slot_of[index] = slot;
      const ReplayOp op{event.size, slot, true};
      plan.ops.push_back(op);
      ++plan.allocations;
      if (trace.partner(index) == memory::kNoEvent) plan.leftovers.push_back({event.size, slot, false});
    } else if (event.action == memory::TraceAction::free) {
      const std::uint32_t slot = slot_of[trace.partner(index)];
      plan.ops.push_back({event.size, slot, false});
      free_slots.push_back(slot);
    }
  }
  return plan;
}

}  // namespace tp::bench

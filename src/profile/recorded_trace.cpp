// SPDX-License-Identifier: Apache-2.0
// recorded_trace(): the recorded events as an RMM allocation trace (memory/trace.hpp) for `tensorpool replay`.
// One device's events, or every device's merged by time, each device's in its own (sequence) order; a replay
// serves a trace from one device, so only a single device's trace reproduces that device's peak. A free is kept only when its
// allocation is in the retained events, so the result always validates (a Trace checks every free). A move by
// compaction becomes a free at the old address and an allocation at the new one, as the stack saw its bytes:
// the trace format has no move.
#include <limits>
#include <unordered_set>

#include "tensorpool/profile/exporters.hpp"

namespace tp::profile {

memory::Trace recorded_trace(const MemorySnapshot& snapshot, const std::optional<std::string>& device) {
  std::vector<const DeviceSnapshot*> sources;
  for (const DeviceSnapshot& entry : snapshot.devices) {
    if (!device || entry.device == *device) sources.push_back(&entry);
  }
  std::vector<std::size_t> next(sources.size(), 0);
  std::unordered_set<std::uintptr_t> live;
  std::vector<memory::TraceEvent> events;
  std::int64_t start_ns = std::numeric_limits<std::int64_t>::max();
  for (const DeviceSnapshot* source : sources) {
    if (!source->events.empty()) start_ns = std::min(start_ns, source->events.front().time_ns);
  }
  while (true) {
    std::size_t chosen = sources.size();
    for (std::size_t index = 0; index < sources.size(); ++index) {
      if (next[index] == sources[index]->events.size()) continue;
      if (chosen == sources.size() ||
          sources[index]->events[next[index]].time_ns < sources[chosen]->events[next[chosen]].time_ns) {
        chosen = index;
      }
    }
    if (chosen == sources.size()) break;
    const MemoryEvent& event = sources[chosen]->events[next[chosen]++];
    memory::TraceEvent out{event.thread,
                           std::max<std::int64_t>(0, event.time_ns - start_ns),
                           memory::TraceAction::allocate,
                           event.address,
                           event.requested_bytes,
                           event.stream};
    if (event.action == EventAction::allocate) {
      live.insert(event.address);
    } else if (event.action == EventAction::relocate) {
      if (live.erase(event.moved_from) == 0) continue;  // allocated before the retained events
      memory::TraceEvent left = out;
      left.action = memory::TraceAction::free;
      left.pointer = event.moved_from;
      events.push_back(left);
      live.insert(event.address);
    } else if (event.action == EventAction::free) {
      if (live.erase(event.address) == 0) continue;  // allocated before the retained events
      out.action = memory::TraceAction::free;
    } else {
      out.action = memory::TraceAction::allocate_failure;
      out.pointer = 0;
    }
    events.push_back(out);
  }
  return memory::Trace(device ? "recorded " + *device : "recorded", std::move(events));
}

}  // namespace tp::profile

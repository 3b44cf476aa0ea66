// SPDX-License-Identifier: Apache-2.0
// chrome_trace_json(): Chrome Trace Event format (the JSON object form). Per device one process (pid = its
// index + 1, named by a metadata event) with a counter track "memory" (in_use, reserved, bytes) and one async
// slice per tensor lifetime (category = the tensor's kind, so Perfetto groups them), from its allocation to
// its free, or to the last event when still live. Times are microseconds since the profiler started.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/rekey.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/profile/exporters.hpp"

namespace tp::profile {
namespace {

using nlohmann::json;

double microseconds(std::int64_t time_ns) { return static_cast<double>(time_ns) / 1000.0; }

std::string shape_text(const memory::AllocationTag& tag) {
  std::string text = tag.dtype + "[";
  for (std::size_t index = 0; index < tag.shape.size(); ++index) {
    text += (index ? "," : "") + std::to_string(tag.shape[index]);
  }
  return text + "]";
}

}  // namespace

std::string chrome_trace_json(const MemorySnapshot& snapshot) {
  json events = json::array();
  for (std::size_t index = 0; index < snapshot.devices.size(); ++index) {
    const DeviceSnapshot& device = snapshot.devices[index];
    const int pid = static_cast<int>(index) + 1;
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", device.device}}}});
    if (device.events.empty()) continue;
    const std::int64_t end_ns = device.events.back().time_ns;
    std::unordered_map<std::uintptr_t, const MemoryEvent*> open;  // allocations without their free yet
    auto slice = [&](const MemoryEvent& allocation, std::int64_t until_ns) {
      const memory::AllocationTag& tag = device.tags.at(allocation.tag);
      const std::string id = fmt::format("{}:{}", pid, allocation.sequence);
      const std::string name = tag.name.empty() ? "<untagged>" : tag.name;
      const std::string category(memory::to_string(tag.kind));
      events.push_back({{"name", name},
                        {"cat", category},
                        {"ph", "b"},
                        {"id", id},
                        {"pid", pid},
                        {"tid", 1},
                        {"ts", microseconds(allocation.time_ns)},
                        {"args",
                         {{"requested_bytes", allocation.requested_bytes},
                          {"allocated_bytes", allocation.allocated_bytes},
                          {"op", tag.op},
                          {"shape", shape_text(tag)},
                          {"step", allocation.step}}}});
      events.push_back({{"name", name},
                        {"cat", category},
                        {"ph", "e"},
                        {"id", id},
                        {"pid", pid},
                        {"tid", 1},
                        {"ts", microseconds(until_ns)}});
    };
    for (const MemoryEvent& event : device.events) {
      events.push_back({{"name", "memory"},
                        {"ph", "C"},
                        {"pid", pid},
                        {"ts", microseconds(event.time_ns)},
                        {"args", {{"in_use", event.in_use_bytes}, {"reserved", event.reserved_bytes}}}});
      if (event.action == EventAction::allocate) {
        open[event.address] = &event;
      } else if (event.action == EventAction::free) {
        const auto found = open.find(event.address);
        if (found == open.end()) continue;  // allocated before the retained events
        slice(*found->second, event.time_ns);
        open.erase(found);
      } else if (event.action == EventAction::relocate) {
        // One tensor's life, wherever compaction put it: its slice goes on until its free at the new address.
        rekey(open, event.moved_from, event.address);
      } else {
        events.push_back(
            {{"name", "out of memory"},
             {"ph", "i"},
             {"s", "p"},
             {"pid", pid},
             {"tid", 1},
             {"ts", microseconds(event.time_ns)},
             {"args", {{"requested_bytes", event.requested_bytes}, {"tag", device.tags.at(event.tag).describe()}}}});
      }
    }
    for (const auto& [address, allocation] : open) slice(*allocation, end_ns);
  }
  const json document = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return document.dump(-1, ' ', false, json::error_handler_t::replace);
}

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out)
    TP_THROW(DataError, "profile", "cannot write ", path.string(), "; check that its directory exists and is writable");
}

}  // namespace tp::profile

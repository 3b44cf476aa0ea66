// SPDX-License-Identifier: Apache-2.0
// snapshot_json(): the snapshot as JSON, schema "tensorpool.memory_snapshot" (docs/profiling.md). Bytes are
// integers; addresses are hex strings (JavaScript numbers cannot hold every 64-bit address); events are
// column-major rows to keep long recordings small.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tensorpool/profile/exporters.hpp"

namespace tp::profile {
namespace {

using nlohmann::json;

std::string hex(std::uintptr_t address) { return fmt::format("{:#x}", address); }

json stats_json(const memory::MemoryStats& stats) {
  return {{"bytes_in_use", stats.bytes_in_use},
          {"peak_bytes_in_use", stats.peak_bytes_in_use},
          {"bytes_reserved", stats.bytes_reserved},
          {"peak_bytes_reserved", stats.peak_bytes_reserved},
          {"bytes_requested", stats.bytes_requested},
          {"peak_bytes_requested", stats.peak_bytes_requested},
          {"num_allocs", stats.num_allocs},
          {"num_frees", stats.num_frees},
          {"largest_alloc", stats.largest_alloc},
          {"largest_free_block", stats.largest_free_block},
          {"fragmentation", stats.fragmentation()},
          {"internal_fragmentation_bytes", stats.internal_fragmentation_bytes()},
          {"num_ooms", stats.num_ooms},
          {"num_retries", stats.num_retries},
          {"upstream_allocs", stats.upstream_allocs},
          {"upstream_frees", stats.upstream_frees},
          {"num_compactions", stats.num_compactions},
          {"bytes_compacted", stats.bytes_compacted},
          {"bytes_limit", stats.bytes_limit ? json(*stats.bytes_limit) : json(nullptr)}};
}

json live_json(const LiveTensor& live) {
  return {{"address", hex(live.address)},
          {"requested_bytes", live.requested_bytes},
          {"allocated_bytes", live.allocated_bytes},
          {"tag", live.tag},
          {"step", live.step},
          {"sequence", live.sequence},
          {"time_ns", live.time_ns}};
}

json rows_json(const std::vector<BreakdownRow>& rows, const char* key) {
  json result = json::array();
  for (const BreakdownRow& row : rows) {
    result.push_back({{key, row.key},
                      {"requested_bytes", row.requested_bytes},
                      {"allocated_bytes", row.allocated_bytes},
                      {"tensors", row.tensors}});
  }
  return result;
}

json segments_json(const std::vector<SnapshotSegment>& segments) {
  json result = json::array();
  for (const SnapshotSegment& segment : segments) {
    json blocks = json::array();
    for (const SnapshotBlock& block : segment.blocks) {
      blocks.push_back({{"offset", block.offset},
                        {"size", block.size},
                        {"requested_bytes", block.requested_bytes},
                        {"state", block.in_use ? "allocated" : "free"},
                        {"tag", block.tag ? json(*block.tag) : json(nullptr)}});
    }
    result.push_back({{"address", hex(segment.address)}, {"size", segment.size}, {"blocks", blocks}});
  }
  return result;
}

json device_json(const DeviceSnapshot& device) {
  json tags = json::array();
  for (const memory::AllocationTag& tag : device.tags) {
    tags.push_back({{"name", tag.name},
                    {"op", tag.op},
                    {"kind", std::string(memory::to_string(tag.kind))},
                    {"dtype", tag.dtype},
                    {"shape", tag.shape}});
  }
  json live = json::array();
  for (const LiveTensor& tensor : device.live) live.push_back(live_json(tensor));
  json peak_tensors = json::array();
  for (const LiveTensor& tensor : device.peak.tensors) peak_tensors.push_back(live_json(tensor));
  json high_water = json::array();
  for (const OpHighWater& op : device.op_high_water) {
    high_water.push_back({{"op", op.op},
                          {"high_water_bytes", op.high_water_bytes},
                          {"current_bytes", op.current_bytes},
                          {"allocations", op.allocations}});
  }
  json rows = json::array();
  for (const MemoryEvent& event : device.events) {
    rows.push_back({std::string(to_string(event.action)), event.tag, hex(event.address), event.requested_bytes,
                    event.allocated_bytes, event.stream, event.thread, event.sequence, event.step, event.time_ns,
                    event.in_use_bytes, event.requested_in_use_bytes, event.reserved_bytes, event.largest_free_block,
                    event.action == EventAction::relocate ? json(hex(event.moved_from)) : json(nullptr)});
  }
  json baseline = json::object();
  for (std::size_t kind = 0; kind < kKinds; ++kind) {
    baseline[std::string(memory::to_string(static_cast<memory::AllocationKind>(kind)))] = device.baseline_by_kind[kind];
  }
  return {
      {"device", device.device},
      {"shared", !device.shared_of.empty()},
      {"shared_of", device.shared_of.empty() ? json(nullptr) : json(device.shared_of)},
      {"allocator", device.allocator},
      {"policy", device.policy},
      {"capacity_bytes", device.capacity_bytes},
      {"limit_bytes", device.limit_bytes},
      {"planned_peak_bytes", device.planned_peak_bytes ? json(*device.planned_peak_bytes) : json(nullptr)},
      {"stats", stats_json(device.stats)},
      {"recording", device.recording},
      {"total_allocated_bytes", device.total_allocated_bytes},
      {"total_freed_bytes", device.total_freed_bytes},
      {"failures", device.failures},
      {"tags", tags},
      {"segments", segments_json(device.segments)},
      {"live", live},
      {"peak",
       {{"in_use_bytes", device.peak.in_use_bytes},
        {"requested_bytes", device.peak.requested_bytes},
        {"sequence", device.peak.sequence},
        {"time_ns", device.peak.time_ns},
        {"by_kind", rows_json(device.peak.by_kind, "kind")},
        {"by_op", rows_json(device.peak.by_op, "op")},
        {"tensors", peak_tensors},
        {"segments", segments_json(device.peak.segments)}}},
      {"op_high_water", high_water},
      {"events",
       {{"dropped", device.dropped_events},
        {"baseline_by_kind", baseline},
        {"columns",
         {"action", "tag", "address", "requested_bytes", "allocated_bytes", "stream", "thread", "sequence", "step",
          "time_ns", "in_use_bytes", "requested_in_use_bytes", "reserved_bytes", "largest_free_block", "moved_from"}},
        {"rows", rows}}}};
}

}  // namespace

std::string_view to_string(EventAction action) noexcept {
  switch (action) {
    case EventAction::allocate: return "allocate";
    case EventAction::free: return "free";
    case EventAction::failure: return "failure";
    case EventAction::relocate: return "relocate";
  }
  return "unknown";
}

std::string snapshot_json(const MemorySnapshot& snapshot, int indent) {
  json devices = json::array();
  for (const DeviceSnapshot& device : snapshot.devices) devices.push_back(device_json(device));
  const json document = {{"schema", "tensorpool.memory_snapshot"},
                         {"version", MemorySnapshot::kSchemaVersion},
                         {"reason", snapshot.reason},
                         {"time_ns", snapshot.time_ns},
                         {"devices", devices}};
  return document.dump(indent, ' ', false, json::error_handler_t::replace);
}

}  // namespace tp::profile

// SPDX-License-Identifier: Apache-2.0
#pragma once
// MemorySnapshot: everything the profiler knows about the devices' memory at one moment: per device the
// allocator's segments with their blocks (offset, size, state, the tag of the tensor in it), every live
// tensor, the stack's counters, and, when a recorder was attached (memory_profiler.hpp), what was live at the
// peak by kind and by op, per-op high-water marks and the recent events. Exporters (exporters.hpp) turn it
// into JSON (schema in docs/profiling.md), a Chrome trace, an RMM trace CSV and an HTML report.
//
// Invariants: every tag index (blocks, live tensors, events, peak tensors) is < tags.size() of its device;
// live tensors are in allocation order; segments and their blocks are in address order.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensorpool/memory/allocation_tag.hpp"
#include "tensorpool/memory/memory_stats.hpp"
#include "tensorpool/profile/memory_event.hpp"

namespace tp::profile {

// AllocationKind values, in enum order (unknown first); indexes of per-kind arrays.
inline constexpr std::size_t kKinds = 9;
using KindBytes = std::array<std::size_t, kKinds>;

struct LiveTensor {
  std::uintptr_t address = 0;
  std::size_t requested_bytes = 0;
  std::size_t allocated_bytes = 0;
  std::uint32_t tag = 0;
  std::int64_t step = -1;
  std::uint64_t sequence = 0;  // the allocation's event sequence (0 when taken without a recorder)
  std::int64_t time_ns = 0;
};

struct SnapshotBlock {
  std::size_t offset = 0;           // from the segment's address
  std::size_t size = 0;             // the block as the allocator holds it
  std::size_t requested_bytes = 0;  // 0 when free
  bool in_use = false;
  std::optional<std::uint32_t> tag{};  // the live tensor in it, when known
};

struct SnapshotSegment {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::vector<SnapshotBlock> blocks{};
};

struct BreakdownRow {
  std::string key{};  // a kind ("activation") or an op ("MatMul")
  std::size_t requested_bytes = 0;
  std::size_t allocated_bytes = 0;
  std::size_t tensors = 0;
};

// What was live when the device's allocated bytes reached their peak (since creation or the last reset).
struct PeakBreakdown {
  std::size_t in_use_bytes = 0;
  std::size_t requested_bytes = 0;
  std::uint64_t sequence = 0;  // the event that reached it
  std::int64_t time_ns = 0;
  std::vector<BreakdownRow> by_kind{};      // largest first
  std::vector<BreakdownRow> by_op{};        // largest first
  std::vector<LiveTensor> tensors{};        // largest first
  std::vector<SnapshotSegment> segments{};  // the allocator's segment map at that moment
};

// The most bytes tensors produced by one op held at once.
struct OpHighWater {
  std::string op{};
  std::size_t high_water_bytes = 0;  // allocated bytes
  std::size_t current_bytes = 0;
  std::uint64_t allocations = 0;
};

struct DeviceSnapshot {
  std::string device{};  // "sim:0"; a device's shared memory: its stack's name, "opencl:0/shared"
  // Set on the entry of a device's shared (host-visible) memory (Device::shared_memory()), which follows the
  // device's own entry: the device's name. Empty for device memory.
  std::string shared_of{};
  std::string allocator{};  // "bfc" | "expandable" | "system"
  std::string policy{};     // "grow" | "preallocate"
  std::size_t capacity_bytes = 0;
  std::size_t limit_bytes = 0;
  memory::MemoryStats stats{};
  std::optional<std::size_t> planned_peak_bytes{};  // set by whoever planned the run (tools, training)
  std::vector<memory::AllocationTag> tags{};
  std::vector<SnapshotSegment> segments{};
  std::vector<LiveTensor> live{};
  // Only with a recorder attached:
  bool recording = false;
  std::uint64_t total_allocated_bytes = 0;  // allocated bytes of every allocation recorded
  std::uint64_t total_freed_bytes = 0;
  std::uint64_t failures = 0;
  PeakBreakdown peak{};
  std::vector<OpHighWater> op_high_water{};  // highest first
  std::vector<MemoryEvent> events{};         // the most recent ones, oldest first
  std::uint64_t dropped_events = 0;          // older events the bounded ring let go
  // Live allocated bytes per kind just before events[0], so a timeline stacked by kind starts right.
  KindBytes baseline_by_kind{};
};

struct MemorySnapshot {
  static constexpr int kSchemaVersion = 1;
  std::int64_t time_ns = 0;  // since the profiler started (0 without one)
  std::string reason{};      // "requested", "out of memory on sim:0", ...
  std::vector<DeviceSnapshot> devices{};
};

}  // namespace tp::profile

// SPDX-License-Identifier: Apache-2.0
// snapshot_device() and snapshot_shared_memory(): the stack's side of a device snapshot (of its device memory
// or its shared memory): figures, the allocator's segment map and, without a recorder, the live tensors as the
// tracking adaptor holds them.
#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include "profile/allocator_segments.hpp"
#include "tensorpool/memory/bfc_allocator.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/sharded_arena.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"
#include "tensorpool/profile/memory_profiler.hpp"

namespace tp::profile {
namespace {

// Without a recorder: the tracking adaptor's live set, tags deduplicated in first-seen order.
void fill_from_tracking(const memory::TrackingAdaptor& tracking, DeviceSnapshot& snapshot,
                        const memory::MemoryResource& allocator) {
  std::map<std::string, std::uint32_t> seen;
  for (const memory::TrackedAllocation& live : tracking.live_allocations()) {
    memory::AllocationTag tag = live.tag;
    const std::int64_t step = tag.step;
    tag.step = -1;
    const std::string key = tag.describe();
    auto [found, added] = seen.try_emplace(key, static_cast<std::uint32_t>(snapshot.tags.size()));
    if (added) snapshot.tags.push_back(std::move(tag));
    snapshot.live.push_back({reinterpret_cast<std::uintptr_t>(live.ptr), live.bytes,
                             allocator.allocated_size(live.ptr, live.bytes), found->second, step, live.sequence, 0});
  }
}

}  // namespace

std::vector<SnapshotSegment> allocator_segments(const memory::MemoryResource& allocator,
                                                const std::vector<LiveTensor>& live_tensors) {
  std::vector<SnapshotSegment> segments;
  std::unordered_map<std::uintptr_t, const LiveTensor*> by_address;
  for (const LiveTensor& live : live_tensors) by_address.emplace(live.address, &live);
  auto tag_at = [&by_address](std::uintptr_t address) -> std::optional<std::uint32_t> {
    const auto found = by_address.find(address);
    if (found == by_address.end()) return std::nullopt;
    return found->second->tag;
  };
  if (const auto* bfc = dynamic_cast<const memory::BfcAllocator*>(&allocator)) {
    for (const memory::BfcAllocator::RegionInfo& region : bfc->regions()) {
      SnapshotSegment segment{region.base, region.size, {}};
      for (const memory::BfcAllocator::ChunkInfo& chunk : region.chunks) {
        segment.blocks.push_back({chunk.offset, chunk.size, chunk.requested, chunk.in_use,
                                  chunk.in_use ? tag_at(region.base + chunk.offset) : std::nullopt});
      }
      segments.push_back(std::move(segment));
    }
    return segments;
  }
  // An expandable arena's blocks are one segment from its base; a sharded arena's, one per shard.
  auto arena_segment = [&tag_at](const memory::ExpandableArena& arena) {
    const std::uintptr_t base = arena.base_address();
    SnapshotSegment segment{base, 0, {}};
    for (const memory::ExpandableArena::BlockInfo& block : arena.blocks()) {
      segment.blocks.push_back({block.offset, block.size, block.requested, block.in_use,
                                block.in_use ? tag_at(base + block.offset) : std::nullopt});
      segment.size = std::max(segment.size, block.offset + block.size);
    }
    return segment;
  };
  if (const auto* arena = dynamic_cast<const memory::ExpandableArena*>(&allocator)) {
    segments.push_back(arena_segment(*arena));
    return segments;
  }
  if (const auto* sharded = dynamic_cast<const memory::ShardedArena*>(&allocator)) {
    for (std::size_t index = 0; index < sharded->shard_count(); ++index) {
      segments.push_back(arena_segment(sharded->shard(index)));
    }
    return segments;
  }
  // `system`: every allocation is its own mapping from the source.
  std::vector<LiveTensor> ordered = live_tensors;
  std::sort(ordered.begin(), ordered.end(),
            [](const LiveTensor& a, const LiveTensor& b) { return a.address < b.address; });
  for (const LiveTensor& live : ordered) {
    segments.push_back(
        {live.address, live.allocated_bytes, {{0, live.allocated_bytes, live.requested_bytes, true, live.tag}}});
  }
  return segments;
}

namespace {

DeviceSnapshot snapshot_stack(memory::MemoryStack& stack, std::string name, std::size_t capacity_bytes,
                              const DeviceRecorder* recorder) {
  DeviceSnapshot snapshot;
  snapshot.device = std::move(name);
  snapshot.allocator = std::string(memory::to_string(stack.config().allocator));
  snapshot.policy = stack.config().policy == memory::GrowthPolicy::grow ? "grow" : "preallocate";
  snapshot.capacity_bytes = capacity_bytes;
  snapshot.limit_bytes = stack.limit_bytes();
  if (recorder != nullptr) {
    recorder->fill(snapshot);
  } else if (const memory::TrackingAdaptor* tracking = stack.tracking()) {
    fill_from_tracking(*tracking, snapshot, stack.allocator());
  }
  // Figures after the live set: an allocation between the two is in the figures, not the other way round.
  snapshot.stats = stack.stats();
  snapshot.segments = allocator_segments(stack.allocator(), snapshot.live);
  return snapshot;
}

}  // namespace

DeviceSnapshot snapshot_device(device::Device& device, const DeviceRecorder* recorder) {
  return snapshot_stack(device.memory(), device.name(), device.capacity_bytes(), recorder);
}

DeviceSnapshot snapshot_shared_memory(device::Device& device, const DeviceRecorder* recorder) {
  memory::MemoryStack& stack = *device.shared_memory();
  DeviceSnapshot snapshot = snapshot_stack(stack, stack.config().device, device.capacity_bytes(), recorder);
  snapshot.shared_of = device.name();
  return snapshot;
}

}  // namespace tp::profile

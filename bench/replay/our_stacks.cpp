// SPDX-License-Identifier: Apache-2.0
#include "our_stacks.hpp"

#include <cmath>

#include "tensorpool/memory/replay.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"

namespace tp::bench {
namespace {

memory::MemoryConfig config_for(const std::string& name, const OurStackOptions& options) {
  memory::MemoryConfig config = memory::replay_memory_config(memory::parse_replay_allocator(name));
  if (options.split_threshold) config.split_threshold = options.split_threshold;
  if (options.thread_cache_bytes) config.thread_cache_bytes = *options.thread_cache_bytes;
  config.tracking = options.tracking;
  if (options.bfc_split) config.bfc_split = *options.bfc_split;
  if (options.policy) config.policy = *options.policy;
  if (options.release_decay_events) config.release_decay_events = *options.release_decay_events;
  config.compact_before_growth = options.compact_before_growth;
  if (options.compaction_slack) config.compaction_slack = *options.compaction_slack;
  if (options.reuse_bytes) config.reuse_bytes = *options.reuse_bytes;
  if (options.arena_shards) config.arena_shards = *options.arena_shards;
  return config;
}

}  // namespace

std::size_t device_capacity(std::size_t peak_live_bytes, double factor) {
  const auto scaled = static_cast<std::size_t>(std::ceil(static_cast<double>(peak_live_bytes) * factor));
  const std::size_t granule = memory::SimDeviceMemory::kGranularity;
  return memory::round_up(scaled > granule ? scaled : granule, granule);
}

std::unique_ptr<memory::MemoryStack> make_our_stack(const std::string& name, std::size_t capacity_bytes,
                                                    const OurStackOptions& options) {
  return memory::make_sim_device_memory_stack(config_for(name, options), capacity_bytes);
}

std::size_t our_min_capacity(const memory::Trace& trace, const std::string& name, const OurStackOptions& options) {
  const memory::MemoryConfig config = config_for(name, options);
  const memory::ResourceFactory factory = [&config](std::size_t capacity) -> std::unique_ptr<memory::MemoryResource> {
    return memory::make_sim_device_memory_stack(config, capacity);
  };
  memory::MinCapacityOptions search;
  search.compact = options.compact_before_growth;
  return memory::find_min_capacity(trace, factory, search).capacity_bytes;
}

}  // namespace tp::bench

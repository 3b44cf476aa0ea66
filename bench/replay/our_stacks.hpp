// SPDX-License-Identifier: Apache-2.0
#pragma once
// Our allocators as the benchmark runs them: exactly the stacks `tensorpool replay` builds
// (replay_memory_config: statistics(allocator(SimDeviceMemory)), no tracking), on a simulated device whose
// capacity is a multiple of the trace's peak live bytes, so the budget never binds: a device with room to
// spare, as a training job usually has. A split threshold may be set for tuning experiments; the table of
// docs/benchmarks.md uses the defaults.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tensorpool/memory/bfc_allocator.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/trace.hpp"

namespace tp::bench {

inline constexpr double kDefaultCapacityFactor = 4.0;

struct OurStackOptions {
  std::optional<std::size_t> split_threshold;     // BFC: MemoryConfig::split_threshold; unset = the default
  std::optional<std::size_t> thread_cache_bytes;  // MemoryConfig::thread_cache_bytes (0: off); unset = the default
  bool tracking = false;  // add the TrackingAdaptor (the devices' default; `tensorpool replay` runs without)
  std::optional<memory::BfcSplit> bfc_split;          // MemoryConfig::bfc_split; unset = the default (tensorflow)
  std::optional<memory::GrowthPolicy> policy;         // MemoryConfig::policy; unset = the allocator name's
  std::optional<std::uint64_t> release_decay_events;  // MemoryConfig::release_decay_events; unset = the default
  // MemoryConfig::compact_before_growth: the replay registers its slots as the arena's relocator
  // (footprint, min-capacity), and min-capacity's probes also compact on a refusal.
  bool compact_before_growth = false;
  std::optional<double> compaction_slack;   // MemoryConfig::compaction_slack; unset = the default
  std::optional<std::size_t> reuse_bytes;   // MemoryConfig::reuse_bytes (0: off); unset = the default
  std::optional<std::size_t> arena_shards;  // MemoryConfig::arena_shards; unset = the default (1)
};

// peak_live_bytes x factor, rounded up to the 2 MiB granule (at least one granule).
std::size_t device_capacity(std::size_t peak_live_bytes, double factor);

// `name`: bfc (preallocates the whole capacity), bfc-grow, expandable.
std::unique_ptr<memory::MemoryStack> make_our_stack(const std::string& name, std::size_t capacity_bytes,
                                                    const OurStackOptions& options = {});

// Smallest capacity (within 1% or 256 KiB) on which `name` replays the trace with no out-of-memory error
// (the replay library's find_min_capacity).
std::size_t our_min_capacity(const memory::Trace& trace, const std::string& name, const OurStackOptions& options = {});

}  // namespace tp::bench

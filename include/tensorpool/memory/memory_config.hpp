// SPDX-License-Identifier: Apache-2.0
#pragma once
// MemoryConfig: how a device's memory stack is built (see memory_stack.hpp), after TensorFlow's GPU
// options: preallocate the budget up front (the default) or grow on demand (allow_growth); a budget given as
// a fraction of the device's capacity or in bytes; which allocator; BFC's garbage collection and split
// threshold and split policy; whether allocations are tracked. apply_env_overrides() lets an operator change
// the policy, allocator, BFC split policy, arena shards and fraction without touching code; every bad value is
// an error, never silently ignored.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/allocation_tag.hpp"
#include "tensorpool/memory/bfc_allocator.hpp"

namespace tp::memory {

// bfc, expandable and system run on every device. cuda_malloc_async (the driver's stream-ordered pool, as
// TensorFlow's cuda_malloc_async) and managed (BFC over cudaMallocManaged: unified memory that may exceed the
// GPU's memory) are sources only a CUDA device has: a stack for another device refuses them (see
// is_cuda_only()).
enum class AllocatorKind { bfc, expandable, system, cuda_malloc_async, managed };

// "bfc", "expandable", "system", "cuda_malloc_async", "managed".
std::string_view to_string(AllocatorKind kind) noexcept;
// Whether only a cuda:N device can serve `kind` (cuda_malloc_async, managed).
[[nodiscard]] constexpr bool is_cuda_only(AllocatorKind kind) noexcept {
  return kind == AllocatorKind::cuda_malloc_async || kind == AllocatorKind::managed;
}
// Whether a stack named `device` is a CUDA device's ("cuda:N", the device's id as to_string writes it).
[[nodiscard]] bool is_cuda_device_name(std::string_view device) noexcept;

struct MemoryConfig {
  static constexpr std::size_t kDefaultSplitThreshold = 128 * kMiB;
  static constexpr std::size_t kDefaultThreadCacheBytes = 4 * kMiB;
  static constexpr std::size_t kDefaultReuseBytes = 16 * kMiB;
  static constexpr std::size_t kMaxArenaShards = 64;
  // The largest fraction managed memory accepts: a budget of 16x the GPU's memory pages to the host anyway.
  static constexpr double kMaxOversubscription = 16.0;

  std::string device = "host";  // names the stack in reports and OOM errors
  // preallocate: BFC takes the whole budget as one region at first use (TensorFlow's default); the
  // expandable arena keeps freed pages committed up to the budget until trim(). grow: BFC grows region by
  // region (allow_growth); the arena gives freed pages beyond its release threshold back once they have gone
  // unused for release_decay_events allocator events. system ignores it.
  GrowthPolicy policy = GrowthPolicy::preallocate;
  // Budget as a fraction of the source's capacity, (0, 1]; above 1 only with allocator = managed, where it
  // oversubscribes the GPU as TensorFlow's per_process_gpu_memory_fraction > 1 does (unified memory pages
  // out to the host).
  std::optional<double> fraction;
  std::optional<std::size_t> limit_bytes;  // budget in bytes; exclusive with fraction
  AllocatorKind allocator = AllocatorKind::bfc;
  bool garbage_collection = true;              // BFC: free wholly free regions and retry before an OOM
  BfcSplit bfc_split = BfcSplit::tensorflow;   // BFC: TensorFlow's split rule, or exact (no 2x slack);
                                               // the other allocators ignore it
  std::optional<std::size_t> split_threshold;  // BFC: split also when the leftover is >= this;
                                               // kDefaultSplitThreshold when unset
  std::optional<double> split_fraction;        // BFC: split threshold = split_fraction x budget, in (0, 1]
                                               // (TensorFlow's fragmentation_fraction); exclusive with
                                               // split_threshold
  bool share_granules = false;                 // expandable: physical granules shared between virtual ones
                                               // (ArenaOptions::share_granules: less memory under random
                                               // sizes, slower requests); the other allocators ignore it
  // expandable: reclaim before growing (growth_pressure.hpp, docs/memory.md). compact_before_growth
  // (ArenaOptions::compact_before_growth): before the arena commits new granules, if growing would leave more
  // than compaction_slack x the in-use bytes (plus a granule) free inside the reservation, the arena compacts
  // first, moving the blocks of the relocator its owner registers (ExpandableArena::set_relocator; without one
  // nothing moves), and the request is placed again; not with share_granules. The other allocators ignore both.
  bool compact_before_growth = false;
  double compaction_slack = 0.02;  // in [0, 1]
  // expandable, grow: freed granules beyond the arena's release threshold are decommitted once unused for this
  // many allocate/free calls (ArenaOptions::release_decay_events; 0 = at once); unset = the arena's default.
  std::optional<std::uint64_t> release_decay_events;
  // expandable: the most bytes of freed blocks (each at most 4 MiB) the arena keeps whole for a request of their
  // exact size (ArenaOptions::reuse_bytes, docs/memory.md), so a loop that frees and allocates the same sizes
  // skips the arena's search; kept blocks are given back before they could cost a granule. 0 turns it off. The
  // other allocators ignore it.
  std::size_t reuse_bytes = kDefaultReuseBytes;
  // expandable: how many arenas the budget serves through (ShardedArena, docs/memory.md "Arena shards"), in
  // [1, kMaxArenaShards]: a thread allocates from one chosen by its index among the running threads, so that
  // threads allocating at the same time (a device's streams, each with its own thread) take different locks.
  // 1 (the default): one arena, the leanest footprint when one thread allocates at a time. The other
  // allocators ignore it.
  std::size_t arena_shards = 1;
  bool tracking = true;  // per-allocation records (TrackingAdaptor) for profiles/OOMs
  // Per thread: the most bytes of freed small blocks (up to 1 MiB each) a thread keeps for its next requests of
  // the same sizes (ThreadCacheAdaptor), so the common allocate/free pair takes no allocator lock; flushed by
  // trim() and before an out-of-memory retry. 0 turns the caches off. Only stacks over BFC with
  // BfcSplit::exact, system and cuda_malloc_async build caches; over TensorFlow's BFC and the expandable arena
  // they would cost more than they save, so those stacks have none (MemoryStack::thread_cache()).
  std::size_t thread_cache_bytes = kDefaultThreadCacheBytes;
  // Allocations of these kinds (by their tag) come from the device's shared (host-visible) memory when it
  // has one (Device::shared_memory(): fine-grained SVM on opencl), so host code and kernels both touch them
  // without copies; on a device without shared memory they come from this stack as usual (the device's
  // shared_memory_note() says so). The default lists `fetched`: a session's fetched results (the loss, the
  // metrics) are then allocated per run from shared memory, outside the step's planned arena, and read by the
  // host in place; on a device without shared memory they stay in the arena. Empty: every allocation, fetched
  // results included, comes from this stack.
  std::vector<AllocationKind> shared_kinds{AllocationKind::fetched};

  // Throws tp::InvalidArgument naming the field and the fix: empty device, fraction outside (0, 1] (above 1
  // only with allocator = managed) or not finite, a CUDA-only allocator on a device not named cuda:N, limit_bytes == 0 or above kMaxAllocationBytes, fraction and limit_bytes both set,
  // split_threshold == 0, split_fraction outside (0, 1] or set together with split_threshold, compaction_slack
  // outside [0, 1], compact_before_growth with share_granules, arena_shards outside [1, kMaxArenaShards], an
  // out-of-range enum value (policy, allocator,
  // bfc_split).
  void validate() const;
};

// Bytes the stack may hold: limit_bytes when set, else fraction x capacity, else the whole capacity.
// Validates the config first. Throws tp::InvalidArgument when the budget cannot be known (no limit_bytes and
// no capacity), exceeds the capacity, or comes out below 256 bytes.
[[nodiscard]] std::size_t resolve_limit_bytes(const MemoryConfig& config, std::optional<std::size_t> capacity);

using GetEnv = std::function<const char*(const char*)>;

// Reads, when set:
//   TP_ALLOW_GROWTH     true|false|1|0|yes|no (any case) -> policy grow | preallocate
//   TP_ALLOCATOR        bfc|expandable|system|cuda_malloc_async|managed (any case) -> allocator (the last two
//                                                          on cuda:N devices only)
//   TP_MEMORY_FRACTION  a decimal number in (0, 1], or above 1 with allocator managed -> fraction; it replaces
//                                                          limit_bytes (an operator's override wins over the
//                                                          budget set in code)
//   TP_BFC_SPLIT        tensorflow|exact (any case)      -> bfc_split
//   TP_THREAD_CACHE     a size (4MiB, 1048576), or on|off|true|false|yes|no -> thread_cache_bytes (off = 0,
//                                                          on = kDefaultThreadCacheBytes)
//   TP_ARENA_SHARDS     a whole number in [1, kMaxArenaShards] -> arena_shards
// Surrounding spaces are ignored. An empty or malformed value throws tp::InvalidArgument naming the
// variable, its value and the accepted values. `get_env` is injectable for tests.
[[nodiscard]] MemoryConfig apply_env_overrides(MemoryConfig config, const GetEnv& get_env = ::getenv);

// The environment a device that is not cuda:N reads. TP_ALLOCATOR is process-wide, but cuda_malloc_async and
// managed only exist on CUDA devices: when it names one of them, the result hides it (the device keeps its
// configured allocator) and hides TP_MEMORY_FRACTION when that is above 1 (managed memory's oversubscription;
// the device keeps its configured budget). Otherwise, and for a malformed TP_ALLOCATOR (which the device's own
// read then refuses), it is get_env itself. `hidden` says whether anything was hidden.
[[nodiscard]] GetEnv env_without_cuda_only_overrides(GetEnv get_env, bool* hidden = nullptr);

}  // namespace tp::memory

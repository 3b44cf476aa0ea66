// SPDX-License-Identifier: Apache-2.0
#pragma once
// Replays an allocation trace (trace.hpp) on a MemoryResource and measures it, as RMM's replay benchmark
// does: one std::thread per thread of the trace, up to kMaxReplayThreads (beyond that, trace thread k runs
// on worker k % kMaxReplayThreads), each event performed in its original order (a global sequence number:
// each worker waits for its turn, spinning briefly and then blocking until the previous event's worker hands
// the turn to it; the wait is not timed), logged pointers mapped to the pointers the resource returns. Each
// allocate and each deallocate is timed alone with std::chrono::steady_clock.
//
// With ReplayOptions::compact, an allocation refused with tp::OutOfMemoryError compacts the given expandable
// arena (the replay's table of live pointers is the Relocator: every live block may move, and the table
// follows each move) and is retried once; the retry is timed with the allocation. When the arena's options
// ask for compaction before growth (ArenaOptions::compact_before_growth), the table is also its registered
// relocator for the replay, so an allocation that would grow the arena may compact it first (timed with the
// allocation). Events are performed one at a time in trace order, so the moment of an allocation is a safe
// point: no other event touches a block.
//
// Out of memory is a result, not an error: the failed allocation is counted (the largest one named), the
// replay continues and the allocation's later free is skipped. "allocate failure" lines of
// the trace are not replayed. Allocations the trace never frees are freed after the replay (timed, so that
// every allocation makes a pair). Any other exception from the resource is rethrown after all threads have
// finished; a thread that cannot be started is a tp::DeviceError naming the count.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/trace.hpp"

namespace tp::memory {

// The most OS threads one replay starts: traces of more threads share them (their order is kept either way).
inline constexpr std::size_t kMaxReplayThreads = 64;

struct ReplayCompaction {
  std::size_t compactions = 0;     // refused allocations that compacted the arena
  std::size_t retries_served = 0;  // ...and were then served by the retry
  // Reclaim before growing (the arena's growth_pressure_stats over the replay): requests that would have
  // grown the arena, compactions before growth (ArenaOptions::compact_before_growth), and requests then served
  // without growing.
  std::size_t growth_requests = 0;
  std::size_t before_growth = 0;
  std::size_t evacuations = 0;  // ...of the compactions before growth, those that evacuated granules (the others slid)
  std::size_t growth_avoided = 0;
  std::size_t blocks_moved = 0;  // over all compactions (on a refusal and before growth)
  std::size_t bytes_copied = 0;
  std::size_t bytes_remapped = 0;
  std::size_t granules_freed = 0;
  std::size_t granularity = 0;  // bytes per granule of the arena
};

struct ReplayResult {
  std::size_t ops = 0;                       // allocate and deallocate calls made for the trace's events
  std::size_t allocations = 0;               // allocations served
  std::size_t oom_count = 0;                 // allocations refused with std::bad_alloc
  std::size_t skipped_frees = 0;             // frees of allocations that had been refused
  std::vector<std::uint64_t> pair_ns;        // per served allocation: its allocate + deallocate time, in order
  std::uint64_t median_pair_ns = 0;          // median of pair_ns (0 when empty)
  std::uint64_t p99_pair_ns = 0;             // 99th percentile (nearest rank) of pair_ns
  std::size_t peak_live_bytes = 0;           // the trace's lower bound: max sum of live requested sizes
  std::size_t peak_reserved_bytes = 0;       // the resource's stats().peak_bytes_reserved over the replay
  double reserved_to_live = 0.0;             // peak_reserved / peak_live (0 when nothing is live)
  std::size_t largest_oom_event = kNoEvent;  // trace index of the largest refused allocation (the earliest of
                                             // equal sizes; Trace::line names it), kNoEvent without OOMs
  std::size_t largest_oom_bytes = 0;         // its size
  ReplayCompaction compaction;               // zeros without ReplayOptions::compact
};

class ExpandableArena;

struct ReplayOptions {
  std::size_t alignment = kDefaultAlignment;  // passed to every allocate
  // Compact this arena and retry once when an allocation is refused, and let it compact before growth when its
  // options say so. It must be the allocator the resource allocates from, with no layer above it that keeps
  // pointers (compactable_arena() finds one); null: off.
  ExpandableArena* compact = nullptr;
  // Fill every allocation with a pattern of its trace event and check it when it is freed: a move that loses
  // or mixes bytes is a tp::DataError naming the trace line. Not timed.
  bool check_contents = false;
};

// The arena compaction can run on under `resource`: the resource itself, or the allocator of a MemoryStack
// without tracking (its records are keyed by pointer: a move would leave them stale; the thread cache holds
// only freed blocks, which no owner lets move). Null otherwise.
[[nodiscard]] ExpandableArena* compactable_arena(MemoryResource& resource) noexcept;

// Resets the resource's peaks first, so peak_reserved_bytes covers this replay only. `alignment` is passed
// to every allocate.
[[nodiscard]] ReplayResult replay(const Trace& trace, MemoryResource& resource,
                                  std::size_t alignment = kDefaultAlignment);
[[nodiscard]] ReplayResult replay(const Trace& trace, MemoryResource& resource, const ReplayOptions& options);

// Median and p99 (nearest rank) of pair_ns over several results (e.g. --repeat), the largest refused
// allocation of all, other fields from the last result.
[[nodiscard]] ReplayResult merge_replays(const std::vector<ReplayResult>& results);

// The allocators `tensorpool replay` compares, each over a SimDeviceMemory of a given capacity:
//   bfc = BfcAllocator preallocating the whole capacity; bfc_grow = BfcAllocator growing region by region;
//   expandable = ExpandableArena (2 MiB granules); system = the device itself under a LimitingAdaptor.
// On a cuda:N device (`tensorpool replay --device cuda:N`) the same four run over the GPU's sources, and two
// more exist only there: cuda_malloc_async = the driver's stream-ordered pool (release threshold = the
// budget); managed = BFC over cudaMallocManaged, growing.
enum class ReplayAllocator : std::uint8_t { bfc, bfc_grow, expandable, system, cuda_malloc_async, managed };

// "bfc", "bfc-grow", "expandable", "system", "cuda_malloc_async", "managed".
std::string_view to_string(ReplayAllocator allocator) noexcept;
// Throws tp::InvalidArgument naming the text and listing the accepted names.
[[nodiscard]] ReplayAllocator parse_replay_allocator(std::string_view name);
// The four every device serves (bfc, bfc_grow, expandable, system): what `--allocator all` runs on sim.
[[nodiscard]] std::vector<ReplayAllocator> all_replay_allocators();
// all_replay_allocators() and the two only a cuda:N device serves: what `--allocator all` runs on cuda.
[[nodiscard]] std::vector<ReplayAllocator> cuda_replay_allocators();
// Device `device` (default "sim:0"), the allocator and policy above, no tracking (the replay measures the
// allocator), the whole capacity as the budget. The CUDA-only allocators are refused by the stack for a
// device not named cuda:N.
[[nodiscard]] MemoryConfig replay_memory_config(ReplayAllocator allocator, std::string device = "sim:0");
[[nodiscard]] std::unique_ptr<MemoryStack> make_replay_stack(ReplayAllocator allocator, std::size_t capacity_bytes);

// Builds a fresh resource of a given capacity for each probe of find_min_capacity.
using ResourceFactory = std::function<std::unique_ptr<MemoryResource>(std::size_t capacity_bytes)>;

struct MinCapacityOptions {
  double relative_tolerance = 0.01;              // stop when the bracket is within this fraction of the capacity...
  std::size_t absolute_tolerance = 256 * kKiB;   // ...or within this many bytes, whichever is larger
  std::size_t max_capacity_bytes = 1024 * kGiB;  // give up (tp::InvalidArgument) above this
  // Each probe compacts its resource's arena (compactable_arena) when it refuses, and before it grows when the
  // arena's options ask for it (ReplayOptions::compact).
  bool compact = false;
};

struct MinCapacityResult {
  std::size_t capacity_bytes = 0;  // replays with zero OOMs
  std::size_t failing_bytes = 0;   // the largest capacity seen to fail (or peak_live - 1, which must fail)
  std::size_t replays = 0;         // probes run
};

// Binary search for the smallest capacity on which the whole trace replays without an OOM. Starts from
// the trace's peak live bytes (no smaller capacity can work), doubles to find a working upper bound, then
// bisects until capacity_bytes - failing_bytes is within the tolerance. A trace that allocates nothing
// returns all zeros.
[[nodiscard]] MinCapacityResult find_min_capacity(const Trace& trace, const ResourceFactory& factory,
                                                  const MinCapacityOptions& options = {});
[[nodiscard]] MinCapacityResult find_min_capacity(const Trace& trace, ReplayAllocator allocator,
                                                  const MinCapacityOptions& options = {});

}  // namespace tp::memory

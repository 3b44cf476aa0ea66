// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/replay.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t nanoseconds_between(Clock::time_point start, Clock::time_point end) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
}

// Nearest-rank percentile of a sorted sample; 0 when empty.
std::uint64_t percentile(const std::vector<std::uint64_t>& sorted, double fraction) {
  if (sorted.empty()) return 0;
  std::size_t rank = static_cast<std::size_t>(fraction * static_cast<double>(sorted.size()) + 0.999999);
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

// Makes (event, bytes) the result's largest refused allocation if it is larger, or as large and earlier.
void keep_larger_oom(ReplayResult& result, std::size_t event, std::size_t bytes) {
  if (event == kNoEvent) return;
  const bool larger = result.largest_oom_event == kNoEvent || bytes > result.largest_oom_bytes ||
                      (bytes == result.largest_oom_bytes && event < result.largest_oom_event);
  if (!larger) return;
  result.largest_oom_event = event;
  result.largest_oom_bytes = bytes;
}

// The contents check's pattern: 8-byte words that differ per allocation and per position, so a block
// copied from the wrong place, shifted, or cut short reads differently.
std::uint64_t pattern_word(std::size_t event, std::size_t word) noexcept {
  std::uint64_t z = (static_cast<std::uint64_t>(event) << 32) ^ word ^ 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void fill_pattern(void* ptr, std::size_t bytes, std::size_t event) noexcept {
  auto* out = static_cast<unsigned char*>(ptr);
  for (std::size_t word = 0; word * 8 < bytes; ++word) {
    const std::uint64_t value = pattern_word(event, word);
    std::memcpy(out + word * 8, &value, std::min<std::size_t>(8, bytes - word * 8));
  }
}

// The first byte that differs from the pattern, or `bytes` when none does.
std::size_t find_pattern_mismatch(const void* ptr, std::size_t bytes, std::size_t event) noexcept {
  const auto* in = static_cast<const unsigned char*>(ptr);
  for (std::size_t word = 0; word * 8 < bytes; ++word) {
    const std::uint64_t value = pattern_word(event, word);
    const std::size_t length = std::min<std::size_t>(8, bytes - word * 8);
    if (std::memcmp(in + word * 8, &value, length) == 0) continue;
    unsigned char expected[8];
    std::memcpy(expected, &value, sizeof expected);
    for (std::size_t byte = 0; byte < length; ++byte) {
      if (in[word * 8 + byte] != expected[byte]) return word * 8 + byte;
    }
  }
  return bytes;
}

void summarize_pairs(ReplayResult& result) {
  std::vector<std::uint64_t> sorted = result.pair_ns;
  std::sort(sorted.begin(), sorted.end());
  result.median_pair_ns = percentile(sorted, 0.5);
  result.p99_pair_ns = percentile(sorted, 0.99);
}

// The workers of a replay: trace thread k (in order of first appearance) runs on worker k % kMaxReplayThreads.
std::vector<std::size_t> assign_workers(const Trace& trace) {
  std::unordered_map<std::uint64_t, std::size_t> rank;
  for (const std::uint64_t thread : trace.threads()) rank.emplace(thread, rank.size());
  std::vector<std::size_t> worker_of_event(trace.size());
  for (std::size_t index = 0; index < trace.size(); ++index) {
    worker_of_event[index] = rank.at(trace.events()[index].thread) % kMaxReplayThreads;
  }
  return worker_of_event;
}

// The replay's live blocks by pointer, kept up to date event by event when the replay compacts: the Relocator
// of its compactions (every live block may move; the replay's pointer of each moved block follows it).
class LiveTable final : public Relocator {
 public:
  // `capacity`: the most blocks live at once (buckets reserved, so a move rehashes nothing).
  LiveTable(std::vector<void*>& pointers, std::size_t capacity) : pointers_(pointers) { by_pointer_.reserve(capacity); }
  void add(const void* ptr, std::size_t event) { by_pointer_.emplace(ptr, event); }
  void remove(const void* ptr) noexcept { by_pointer_.erase(ptr); }
  bool can_move(const void* ptr, std::size_t /*bytes*/) override { return by_pointer_.contains(ptr); }
  void relocated(void* from, void* to, std::size_t /*bytes*/) noexcept override {
    auto node = by_pointer_.extract(from);  // reuses the node: no allocation
    if (node.empty()) return;               // can_move said no to it: not moved
    pointers_[node.mapped()] = to;
    node.key() = to;
    by_pointer_.insert(std::move(node));
  }

 private:
  std::vector<void*>& pointers_;
  std::unordered_map<const void*, std::size_t> by_pointer_;
};

// Registers the live table as the arena's relocator for compaction before growth (when its options ask for
// it) for the replay's duration.
class RelocatorRegistration {
 public:
  RelocatorRegistration(ExpandableArena* arena, Relocator* relocator)
      : arena_(arena != nullptr && arena->options().compact_before_growth ? arena : nullptr) {
    if (arena_ != nullptr) arena_->set_relocator(relocator);
  }
  RelocatorRegistration(const RelocatorRegistration&) = delete;
  RelocatorRegistration& operator=(const RelocatorRegistration&) = delete;
  ~RelocatorRegistration() {
    if (arena_ != nullptr) arena_->set_relocator(nullptr);
  }

 private:
  ExpandableArena* arena_;
};

// One replay. Each event index is touched by exactly one worker, and a free reads its allocation's pointer
// only after the turn counter (release/acquire) says the allocation happened. The worker that performs event
// i hands the turn to event i + 1's worker alone: it stores turn_ = i + 1, then bumps that worker's wake-up
// generation (release), so a worker that read its generation before checking turn_ cannot sleep through it.
class ReplayRun {
 public:
  ReplayRun(const Trace& trace, MemoryResource& resource, const ReplayOptions& options)
      : trace_(trace),
        resource_(resource),
        alignment_(options.alignment),
        options_(options),
        worker_of_event_(assign_workers(trace)),
        wake_ups_(std::min(trace.threads().size(), kMaxReplayThreads)),
        pointers_(trace.size(), nullptr),
        allocate_ns_(trace.size(), 0),
        free_ns_(trace.size(), 0),
        live_(pointers_, options.compact != nullptr ? trace.allocation_count() : 0) {}

  ReplayResult run() {
    resource_.reset_peak();
    // Compaction before growth moves the blocks of the live table from inside allocate: events run one at a
    // time in trace order, so whichever event is allocating, no other touches a block.
    const RelocatorRegistration registration(options_.compact, &live_);
    const GrowthPressureStats growth_before =
        options_.compact != nullptr ? options_.compact->growth_pressure_stats() : GrowthPressureStats{};
    std::vector<std::vector<std::size_t>> schedules(wake_ups_.size());
    for (std::size_t index = 0; index < trace_.size(); ++index) schedules[worker_of_event_[index]].push_back(index);
    std::vector<Tally> tallies(schedules.size());
    std::vector<std::thread> workers;
    workers.reserve(schedules.size());
    try {
      for (std::size_t worker = 0; worker < schedules.size(); ++worker) {
        workers.emplace_back(
            [this, &schedules, &tallies, worker] { work(worker, schedules[worker], tallies[worker]); });
      }
    } catch (const std::system_error& error) {
      abort_.store(true);
      for (std::size_t worker = 0; worker < workers.size(); ++worker) wake(worker);
      for (std::thread& worker : workers) worker.join();
      TP_THROW(DeviceError, "replay", trace_.source(), ": cannot start replay thread ", workers.size() + 1, " of ",
               schedules.size(), " (", error.what(), "); the host limits threads per process (ulimit -u)");
    }
    for (std::thread& worker : workers) worker.join();
    if (error_) {
      release_leftovers();  // give back what the replay still holds before the error leaves
      std::rethrow_exception(error_);
    }

    ReplayResult result;
    for (const Tally& tally : tallies) {
      result.ops += tally.ops;
      result.allocations += tally.allocations;
      result.oom_count += tally.ooms;
      result.skipped_frees += tally.skipped_frees;
      keep_larger_oom(result, tally.largest_oom_event, tally.largest_oom_bytes);
    }
    result.compaction = compaction_;
    if (options_.compact != nullptr) add_growth_compactions(result.compaction, growth_before);
    const MemoryStats stats = resource_.stats();
    release_leftovers();
    for (std::size_t index = 0; index < trace_.size(); ++index) {
      if (pointers_[index] != nullptr) result.pair_ns.push_back(allocate_ns_[index] + free_ns_[index]);
    }
    summarize_pairs(result);
    result.peak_live_bytes = trace_.peak_live_bytes();
    result.peak_reserved_bytes = stats.peak_bytes_reserved;
    if (result.peak_live_bytes != 0) {
      result.reserved_to_live =
          static_cast<double>(result.peak_reserved_bytes) / static_cast<double>(result.peak_live_bytes);
    }
    return result;
  }

 private:
  struct Tally {
    std::size_t ops = 0;
    std::size_t allocations = 0;
    std::size_t ooms = 0;
    std::size_t skipped_frees = 0;
    std::size_t largest_oom_event = kNoEvent;
    std::size_t largest_oom_bytes = 0;
  };

  // A worker's wake-up generation, on its own cache line so that hand-offs to one worker do not disturb others.
  struct alignas(64) WakeUp {
    std::atomic<std::uint32_t> generation{0};
  };

  void work(std::size_t worker, const std::vector<std::size_t>& schedule, Tally& tally) {
    for (const std::size_t index : schedule) {
      if (!wait_turn(worker, index)) return;
      perform(index, tally);
      turn_.store(index + 1, std::memory_order_release);
      if (index + 1 < trace_.size() && worker_of_event_[index + 1] != worker) wake(worker_of_event_[index + 1]);
    }
  }

  void wake(std::size_t worker) {
    wake_ups_[worker].generation.fetch_add(1, std::memory_order_release);
    wake_ups_[worker].generation.notify_one();
  }

  // Spins briefly, then yields, then blocks until it is event `index`'s turn; false when aborted.
  bool wait_turn(std::size_t worker, std::size_t index) {
    constexpr int kSpins = 64;
    constexpr int kYields = 64;
    for (int attempt = 0;; ++attempt) {
      const std::uint32_t generation = wake_ups_[worker].generation.load(std::memory_order_acquire);
      if (abort_.load(std::memory_order_relaxed)) return false;
      if (turn_.load(std::memory_order_acquire) == index) return true;
      if (attempt >= kSpins + kYields) {
        wake_ups_[worker].generation.wait(generation, std::memory_order_acquire);
      } else if (attempt >= kSpins) {
        std::this_thread::yield();
      }
    }
  }

  void perform(std::size_t index, Tally& tally) {
    const TraceEvent& event = trace_.events()[index];
    switch (event.action) {
      case TraceAction::allocate_failure: return;
      case TraceAction::allocate: {
        ++tally.ops;
        try {
          const Clock::time_point start = Clock::now();
          void* ptr =
              options_.compact != nullptr ? allocate_or_compact(index) : resource_.allocate(event.size, alignment_);
          const Clock::time_point end = Clock::now();
          pointers_[index] = ptr;
          if (options_.compact != nullptr) live_.add(ptr, index);
          allocate_ns_[index] = nanoseconds_between(start, end);
          ++tally.allocations;
          if (options_.check_contents) fill_pattern(ptr, event.size, index);
        } catch (const std::bad_alloc&) {
          ++tally.ooms;
          if (tally.largest_oom_event == kNoEvent || event.size > tally.largest_oom_bytes) {
            tally.largest_oom_event = index;  // a worker's events come in order: the earliest of equal sizes
            tally.largest_oom_bytes = event.size;
          }
        } catch (...) {
          const std::lock_guard lock(error_mutex_);
          if (!error_) error_ = std::current_exception();
        }
        return;
      }
      case TraceAction::free: {
        const std::size_t allocation = trace_.partner(index);
        void* ptr = pointers_[allocation];
        if (ptr == nullptr) {
          ++tally.skipped_frees;
          return;
        }
        ++tally.ops;
        if (options_.check_contents) check_pattern(ptr, event.size, allocation);
        if (options_.compact != nullptr) live_.remove(ptr);
        const Clock::time_point start = Clock::now();
        resource_.deallocate(ptr, event.size);
        const Clock::time_point end = Clock::now();
        free_ns_[allocation] = nanoseconds_between(start, end);
        return;
      }
    }
  }

  // Allocates event `index`; when refused with tp::OutOfMemoryError, compacts the arena and retries once.
  void* allocate_or_compact(std::size_t index) {
    const std::size_t bytes = trace_.events()[index].size;
    try {
      return resource_.allocate(bytes, alignment_);
    } catch (const OutOfMemoryError&) {
      const CompactionResult compaction = options_.compact->compact(live_);
      ++compaction_.compactions;
      compaction_.blocks_moved += compaction.blocks_moved;
      compaction_.bytes_copied += compaction.bytes_copied;
      compaction_.bytes_remapped += compaction.bytes_remapped;
      compaction_.granules_freed += compaction.granules_freed;
      compaction_.granularity = compaction.granularity;
    }
    void* ptr = resource_.allocate(bytes, alignment_);  // a second refusal is the replay's OOM
    ++compaction_.retries_served;
    return ptr;
  }

  // What the arena's compactions before growth did during the replay (its totals since `before`).
  void add_growth_compactions(ReplayCompaction& compaction, const GrowthPressureStats& before) const {
    const GrowthPressureStats after = options_.compact->growth_pressure_stats();
    compaction.growth_requests = after.growth_requests - before.growth_requests;
    compaction.before_growth = after.compactions - before.compactions;
    compaction.evacuations = after.evacuations - before.evacuations;
    compaction.growth_avoided = after.growth_avoided - before.growth_avoided;
    compaction.blocks_moved += after.blocks_moved - before.blocks_moved;
    compaction.bytes_copied += after.bytes_copied - before.bytes_copied;
    compaction.bytes_remapped += after.bytes_remapped - before.bytes_remapped;
    compaction.granules_freed += after.granules_freed - before.granules_freed;
    compaction.granularity = options_.compact->granularity();
  }

  void check_pattern(const void* ptr, std::size_t bytes, std::size_t allocation) {
    const std::size_t mismatch = find_pattern_mismatch(ptr, bytes, allocation);
    if (mismatch == bytes) return;
    try {
      TP_THROW(DataError, "replay", trace_.source(), ":", trace_.line(allocation), ": the ", bytes,
               "-byte allocation's contents changed at byte ", mismatch,
               " before its free: the allocator lost or mixed its bytes (a wrong move or an overlap)");
    } catch (...) {
      const std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }

  // Frees (timed) what the trace left allocated, so the resource ends empty and every allocation is a pair.
  void release_leftovers() {
    for (std::size_t index = 0; index < trace_.size(); ++index) {
      if (pointers_[index] == nullptr || trace_.partner(index) != kNoEvent) continue;
      const Clock::time_point start = Clock::now();
      resource_.deallocate(pointers_[index], trace_.events()[index].size);
      free_ns_[index] = nanoseconds_between(start, Clock::now());
    }
  }

  const Trace& trace_;
  MemoryResource& resource_;
  const std::size_t alignment_;
  const ReplayOptions options_;
  ReplayCompaction compaction_;                     // written by the worker holding the turn only
  const std::vector<std::size_t> worker_of_event_;  // per event: the worker that performs it
  std::vector<WakeUp> wake_ups_;                    // per worker; sized once, never moved
  std::vector<void*> pointers_;                     // per allocate event: the replayed pointer, null if refused
  std::vector<std::uint64_t> allocate_ns_;          // per allocate event
  std::vector<std::uint64_t> free_ns_;              // per allocate event: the time of its free
  LiveTable live_;                                  // with compaction: written by the worker holding the turn only
  std::atomic<std::uint64_t> turn_{0};              // index of the next event to perform
  std::atomic<bool> abort_{false};
  std::mutex error_mutex_;  // guards error_
  std::exception_ptr error_;
};

}  // namespace

ReplayResult replay(const Trace& trace, MemoryResource& resource, std::size_t alignment) {
  ReplayOptions options;
  options.alignment = alignment;
  return ReplayRun(trace, resource, options).run();
}

ReplayResult replay(const Trace& trace, MemoryResource& resource, const ReplayOptions& options) {
  return ReplayRun(trace, resource, options).run();
}

ExpandableArena* compactable_arena(MemoryResource& resource) noexcept {
  if (auto* arena = dynamic_cast<ExpandableArena*>(&resource)) return arena;
  auto* stack = dynamic_cast<MemoryStack*>(&resource);
  // The tracking adaptor keys its records by pointer: a move would leave them stale. The thread cache keeps
  // freed blocks only, which no owner lets move, and flushes itself before an OOM leaves it.
  if (stack == nullptr || stack->tracking() != nullptr) return nullptr;
  return dynamic_cast<ExpandableArena*>(&stack->allocator());
}

ReplayResult merge_replays(const std::vector<ReplayResult>& results) {
  if (results.empty()) return {};
  ReplayResult merged = results.back();
  merged.pair_ns.clear();
  for (const ReplayResult& result : results) {
    merged.pair_ns.insert(merged.pair_ns.end(), result.pair_ns.begin(), result.pair_ns.end());
  }
  for (const ReplayResult& result : results)
    keep_larger_oom(merged, result.largest_oom_event, result.largest_oom_bytes);
  summarize_pairs(merged);
  return merged;
}

std::string_view to_string(ReplayAllocator allocator) noexcept {
  switch (allocator) {
    case ReplayAllocator::bfc: return "bfc";
    case ReplayAllocator::bfc_grow: return "bfc-grow";
    case ReplayAllocator::expandable: return "expandable";
    case ReplayAllocator::system: return "system";
    case ReplayAllocator::cuda_malloc_async: return "cuda_malloc_async";
    case ReplayAllocator::managed: return "managed";
  }
  return "unknown";
}

ReplayAllocator parse_replay_allocator(std::string_view name) {
  for (const ReplayAllocator allocator : cuda_replay_allocators()) {
    if (name == to_string(allocator)) return allocator;
  }
  TP_THROW(InvalidArgument, "replay", "unknown allocator '", name,
           "'; use bfc, bfc-grow, expandable or system (or, on a cuda device, cuda_malloc_async or managed)");
}

std::vector<ReplayAllocator> all_replay_allocators() {
  return {ReplayAllocator::bfc, ReplayAllocator::bfc_grow, ReplayAllocator::expandable, ReplayAllocator::system};
}

std::vector<ReplayAllocator> cuda_replay_allocators() {
  std::vector<ReplayAllocator> allocators = all_replay_allocators();
  allocators.push_back(ReplayAllocator::cuda_malloc_async);
  allocators.push_back(ReplayAllocator::managed);
  return allocators;
}

MemoryConfig replay_memory_config(ReplayAllocator allocator, std::string device) {
  MemoryConfig config;
  config.device = std::move(device);
  config.tracking = false;
  const bool grows = allocator == ReplayAllocator::bfc_grow || allocator == ReplayAllocator::managed;
  config.policy = grows ? GrowthPolicy::grow : GrowthPolicy::preallocate;
  switch (allocator) {
    case ReplayAllocator::bfc:
    case ReplayAllocator::bfc_grow: config.allocator = AllocatorKind::bfc; break;
    case ReplayAllocator::expandable: config.allocator = AllocatorKind::expandable; break;
    case ReplayAllocator::system: config.allocator = AllocatorKind::system; break;
    case ReplayAllocator::cuda_malloc_async: config.allocator = AllocatorKind::cuda_malloc_async; break;
    case ReplayAllocator::managed: config.allocator = AllocatorKind::managed; break;
  }
  return config;
}

std::unique_ptr<MemoryStack> make_replay_stack(ReplayAllocator allocator, std::size_t capacity_bytes) {
  return make_sim_device_memory_stack(replay_memory_config(allocator), capacity_bytes);
}

MinCapacityResult find_min_capacity(const Trace& trace, const ResourceFactory& factory,
                                    const MinCapacityOptions& options) {
  MinCapacityResult result;
  if (trace.peak_live_bytes() == 0) return result;
  std::string last_refusal;
  auto works = [&](std::size_t capacity) {
    ++result.replays;
    std::unique_ptr<MemoryResource> resource;
    try {
      resource = factory(capacity);
    } catch (const InvalidArgument& error) {
      last_refusal = error.what();  // too small to build a stack: as good as an OOM
      return false;
    }
    ReplayOptions replay_options;
    if (options.compact) replay_options.compact = compactable_arena(*resource);
    return replay(trace, *resource, replay_options).oom_count == 0;
  };
  // No capacity below the peak of live bytes can hold them all at once.
  std::size_t failing = trace.peak_live_bytes() - 1;
  std::size_t working = trace.peak_live_bytes();
  while (!works(working)) {
    failing = working;
    if (working >= options.max_capacity_bytes) {
      TP_THROW(InvalidArgument, "replay", trace.source(), ": no capacity up to ",
               format_bytes(options.max_capacity_bytes), " replays without running out of memory",
               last_refusal.empty() ? "" : "; last refusal: ", last_refusal);
    }
    working = std::min(options.max_capacity_bytes, working * 2);
  }
  auto tolerance = [&] {
    const auto relative = static_cast<std::size_t>(static_cast<double>(working) * options.relative_tolerance);
    return std::max({relative, options.absolute_tolerance, std::size_t{1}});
  };
  while (working - failing > tolerance()) {
    const std::size_t middle = failing + (working - failing) / 2;
    if (works(middle)) {
      working = middle;
    } else {
      failing = middle;
    }
  }
  result.capacity_bytes = working;
  result.failing_bytes = failing;
  return result;
}

MinCapacityResult find_min_capacity(const Trace& trace, ReplayAllocator allocator, const MinCapacityOptions& options) {
  return find_min_capacity(
      trace,
      [allocator](std::size_t capacity) -> std::unique_ptr<MemoryResource> {
        return make_replay_stack(allocator, capacity);
      },
      options);
}

}  // namespace tp::memory

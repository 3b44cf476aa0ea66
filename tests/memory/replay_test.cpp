// SPDX-License-Identifier: Apache-2.0
// The replay engine on small hand-written traces: exact peak live, OOM counting and skipped frees, the
// largest refusal named, the original interleaving of threads (also beyond kMaxReplayThreads), pointer
// mapping across threads, and the minimum-capacity search.
#include "tensorpool/memory/replay.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/host_resource.hpp"
#include "tensorpool/memory/limiting_adaptor.hpp"
#include "tensorpool/memory/trace_generators.hpp"

namespace {

using tp::memory::MemoryResource;
using tp::memory::ReplayAllocator;
using tp::memory::Trace;
using tp::memory::TraceAction;
using tp::memory::TraceEvent;

TraceEvent alloc(std::uint64_t thread, std::uintptr_t pointer, std::size_t size) {
  return TraceEvent{thread, 0, TraceAction::allocate, pointer, size, 0};
}
TraceEvent release(std::uint64_t thread, std::uintptr_t pointer, std::size_t size) {
  return TraceEvent{thread, 0, TraceAction::free, pointer, size, 0};
}

// Serves from the host and records every call (which OS thread, what size) in the order they happen.
class RecordingResource final : public MemoryResource {
 public:
  struct Call {
    bool allocate;
    std::size_t bytes;
    std::thread::id thread;
  };
  RecordingResource() : MemoryResource("recording") {}

  std::vector<Call> calls() const {
    const std::lock_guard lock(mutex_);
    return calls_;
  }
  std::size_t outstanding() const {
    const std::lock_guard lock(mutex_);
    return live_.size();
  }
  std::size_t throw_on_bytes = 0;  // allocate of exactly this size throws std::runtime_error

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const tp::memory::AllocationTag& tag) override {
    if (bytes == throw_on_bytes) throw std::runtime_error("recording: refused on purpose");
    void* ptr = host_.allocate(bytes, alignment, tag);
    const std::lock_guard lock(mutex_);
    calls_.push_back(Call{true, bytes, std::this_thread::get_id()});
    live_.emplace(ptr, bytes);
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override {
    {
      const std::lock_guard lock(mutex_);
      calls_.push_back(Call{false, bytes, std::this_thread::get_id()});
      const auto it = live_.find(ptr);
      if (it == live_.end() || it->second != bytes) mismatches_++;
      if (it != live_.end()) live_.erase(it);
    }
    host_.deallocate(ptr, bytes);
  }
  tp::memory::MemoryStats do_stats() const override {
    tp::memory::MemoryStats stats = host_.stats();
    const std::lock_guard lock(mutex_);
    stats.num_ooms = mismatches_;  // abused as a mismatch counter: must stay 0
    return stats;
  }
  void do_reset_peak() override { host_.reset_peak(); }

  tp::memory::HostResource host_;
  mutable std::mutex mutex_;  // guards calls_, live_, mismatches_
  std::vector<Call> calls_;
  std::map<void*, std::size_t> live_;
  std::uint64_t mismatches_ = 0;
};

TEST(Replay, ReportsExactPeakLiveAndFootprint) {
  const Trace trace("peak", {alloc(0, 0x10, 100), alloc(0, 0x20, 200), release(0, 0x10, 100), alloc(0, 0x30, 300),
                             release(0, 0x30, 300), release(0, 0x20, 200)});
  EXPECT_EQ(trace.peak_live_bytes(), 500u);
  const auto stack = tp::memory::make_replay_stack(ReplayAllocator::system, 64 * tp::kMiB);
  const tp::memory::ReplayResult result = tp::memory::replay(trace, *stack);
  EXPECT_EQ(result.peak_live_bytes, 500u);
  EXPECT_EQ(result.ops, 6u);
  EXPECT_EQ(result.allocations, 3u);
  EXPECT_EQ(result.oom_count, 0u);
  EXPECT_EQ(result.pair_ns.size(), 3u);
  EXPECT_LE(result.median_pair_ns, result.p99_pair_ns);
  EXPECT_GE(result.peak_reserved_bytes, result.peak_live_bytes);
  EXPECT_DOUBLE_EQ(result.reserved_to_live, static_cast<double>(result.peak_reserved_bytes) / 500.0);
  EXPECT_EQ(stack->stats().bytes_in_use, 0u);
}

TEST(Replay, CountsOomsContinuesAndSkipsTheirFrees) {
  // A 1000-byte wall: the second allocation cannot fit while the first is live.
  tp::memory::HostResource host;
  tp::memory::LimitingAdaptor limit(host, 1000);
  const Trace trace(
      "oom", {alloc(0, 0x10, 800), alloc(0, 0x20, 400), release(0, 0x10, 800), release(0, 0x20, 400),
              alloc(0, 0x30, 900), release(0, 0x30, 900), TraceEvent{0, 0, TraceAction::allocate_failure, 0, 5000, 0}});
  const tp::memory::ReplayResult result = tp::memory::replay(trace, limit);
  EXPECT_EQ(result.oom_count, 1u);
  EXPECT_EQ(result.skipped_frees, 1u);
  EXPECT_EQ(result.allocations, 2u);
  EXPECT_EQ(result.ops, 5u);  // 3 allocate calls (one refused) + 2 frees; the logged failure is not replayed
  EXPECT_EQ(limit.outstanding_bytes(), 0u);
}

TEST(Replay, NamesTheLargestRefusedAllocation) {
  tp::memory::HostResource host;
  tp::memory::LimitingAdaptor limit(host, 1000);
  const Trace trace("oom", {alloc(0, 0x10, 800), alloc(1, 0x20, 400), alloc(0, 0x30, 2000), alloc(1, 0x40, 2000),
                            release(0, 0x10, 800), alloc(1, 0x50, 100), release(1, 0x50, 100)});
  const tp::memory::ReplayResult result = tp::memory::replay(trace, limit);
  EXPECT_EQ(result.oom_count, 3u);
  EXPECT_EQ(result.largest_oom_event, 2u) << "the largest refusal, the earliest of equal sizes";
  EXPECT_EQ(result.largest_oom_bytes, 2000u);

  const tp::memory::ReplayResult clean = tp::memory::replay(Trace("clean", {alloc(0, 0x10, 8)}), limit);
  EXPECT_EQ(clean.largest_oom_event, tp::memory::kNoEvent);
  const tp::memory::ReplayResult merged = tp::memory::merge_replays({result, clean});
  EXPECT_EQ(merged.largest_oom_event, 2u) << "a repeat without OOMs must not hide an earlier one";
  EXPECT_EQ(merged.largest_oom_bytes, 2000u);
}

TEST(Replay, TracesOfMoreThreadsThanTheLimitShareWorkersInOrder) {
  // Three times as many logged threads as OS threads a replay starts; sizes encode the event index.
  const std::size_t threads = 3 * tp::memory::kMaxReplayThreads;
  std::vector<TraceEvent> events;
  for (std::size_t thread = 0; thread < threads; ++thread) {
    events.push_back(alloc(thread, 0x1000 * (thread + 1), thread + 1));
  }
  for (std::size_t thread = threads; thread-- > 0;) {
    events.push_back(release(thread, 0x1000 * (thread + 1), thread + 1));
  }
  const Trace trace("many threads", events);
  ASSERT_EQ(trace.threads().size(), threads);

  RecordingResource resource;
  const tp::memory::ReplayResult result = tp::memory::replay(trace, resource);
  const std::vector<RecordingResource::Call> calls = resource.calls();
  ASSERT_EQ(calls.size(), trace.size());
  std::set<std::thread::id> os_threads;
  for (std::size_t index = 0; index < trace.size(); ++index) {
    EXPECT_EQ(calls[index].allocate, trace.events()[index].action == TraceAction::allocate) << index;
    EXPECT_EQ(calls[index].bytes, trace.events()[index].size) << index;
    os_threads.insert(calls[index].thread);
  }
  EXPECT_EQ(os_threads.size(), tp::memory::kMaxReplayThreads);
  EXPECT_EQ(result.ops, 2 * threads);
  EXPECT_EQ(resource.outstanding(), 0u);
}

TEST(Replay, PreservesTheInterleavingOfThreadsAndMapsPointersAcrossThem) {
  // Sizes encode the event index, so the recorded call order can be checked against the trace.
  std::vector<TraceEvent> events;
  std::vector<std::pair<std::uintptr_t, std::size_t>> live;
  const std::uint64_t pattern[] = {0, 1, 2, 2, 1, 0, 0, 2, 1, 1, 0, 2};
  std::size_t size = 1;
  for (int round = 0; round < 20; ++round) {
    for (const std::uint64_t thread : pattern) {
      if (!live.empty() && (size % 3 == 0)) {
        const auto [pointer, bytes] = live.front();  // often freed by another thread than its allocator
        live.erase(live.begin());
        events.push_back(release(thread, pointer, bytes));
      } else {
        events.push_back(alloc(thread, 0x1000 * size, size));
        live.emplace_back(0x1000 * size, size);
      }
      ++size;
    }
  }
  for (const auto& [pointer, bytes] : live) events.push_back(release(0, pointer, bytes));
  const Trace trace("threads", events);
  ASSERT_EQ(trace.threads().size(), 3u);

  RecordingResource resource;
  const tp::memory::ReplayResult result = tp::memory::replay(trace, resource);
  const std::vector<RecordingResource::Call> calls = resource.calls();
  ASSERT_EQ(calls.size(), trace.size());
  std::map<std::uint64_t, std::thread::id> os_thread_of;
  std::set<std::thread::id> os_threads;
  for (std::size_t index = 0; index < trace.size(); ++index) {
    const TraceEvent& event = trace.events()[index];
    EXPECT_EQ(calls[index].allocate, event.action == TraceAction::allocate) << index;
    EXPECT_EQ(calls[index].bytes, event.size) << index;
    const auto [it, inserted] = os_thread_of.emplace(event.thread, calls[index].thread);
    if (inserted) {
      EXPECT_TRUE(os_threads.insert(calls[index].thread).second) << "two logged threads share an OS thread";
    } else {
      EXPECT_EQ(it->second, calls[index].thread) << "logged thread " << event.thread << " moved at event " << index;
    }
  }
  EXPECT_EQ(resource.stats().num_ooms, 0u) << "a free named a pointer or size the resource did not hand out";
  EXPECT_EQ(resource.outstanding(), 0u);
  EXPECT_EQ(result.oom_count, 0u);
}

TEST(Replay, FreesWhatTheTraceLeavesLiveAndTimesEveryPair) {
  RecordingResource resource;
  const Trace trace("leftover", {alloc(0, 0x10, 10), alloc(1, 0x20, 20), release(1, 0x10, 10)});
  const tp::memory::ReplayResult result = tp::memory::replay(trace, resource);
  EXPECT_EQ(resource.outstanding(), 0u);
  EXPECT_EQ(result.pair_ns.size(), 2u);
  EXPECT_EQ(result.ops, 3u);
}

TEST(Replay, RethrowsOtherErrorsAfterAllThreadsFinish) {
  RecordingResource resource;
  resource.throw_on_bytes = 20;
  const Trace trace("error", {alloc(0, 0x10, 10), alloc(1, 0x20, 20), alloc(0, 0x30, 30), release(1, 0x20, 20),
                              release(0, 0x10, 10), release(0, 0x30, 30)});
  EXPECT_THROW(tp::memory::replay(trace, resource), std::runtime_error);
  EXPECT_EQ(resource.outstanding(), 0u) << "allocations must be released even when the replay fails";
}

TEST(Replay, MergesRepeatsByPoolingLatencies) {
  tp::memory::ReplayResult first;
  first.pair_ns = {10, 20, 30};
  tp::memory::ReplayResult second;
  second.pair_ns = {40, 50};
  second.peak_live_bytes = 7;
  const tp::memory::ReplayResult merged = tp::memory::merge_replays({first, second});
  EXPECT_EQ(merged.pair_ns.size(), 5u);
  EXPECT_EQ(merged.median_pair_ns, 30u);
  EXPECT_EQ(merged.p99_pair_ns, 50u);
  EXPECT_EQ(merged.peak_live_bytes, 7u);
}

TEST(ReplayAllocator, ParsesNamesAndRejectsOthers) {
  for (const ReplayAllocator allocator : tp::memory::all_replay_allocators()) {
    EXPECT_EQ(tp::memory::parse_replay_allocator(tp::memory::to_string(allocator)), allocator);
  }
  EXPECT_THROW((void)tp::memory::parse_replay_allocator("tlsf"), tp::InvalidArgument);
  EXPECT_EQ(tp::memory::replay_memory_config(ReplayAllocator::bfc_grow).policy, tp::memory::GrowthPolicy::grow);
  EXPECT_EQ(tp::memory::replay_memory_config(ReplayAllocator::expandable).allocator,
            tp::memory::AllocatorKind::expandable);
  // The CUDA-only allocators parse, are not in the sim list, and a sim stack refuses them naming the device.
  for (const ReplayAllocator allocator : {ReplayAllocator::cuda_malloc_async, ReplayAllocator::managed}) {
    EXPECT_EQ(tp::memory::parse_replay_allocator(tp::memory::to_string(allocator)), allocator);
    const auto sim = tp::memory::all_replay_allocators();
    EXPECT_EQ(std::count(sim.begin(), sim.end(), allocator), 0);
    const auto cuda = tp::memory::cuda_replay_allocators();
    EXPECT_EQ(std::count(cuda.begin(), cuda.end(), allocator), 1);
    EXPECT_THROW((void)tp::memory::make_replay_stack(allocator, 64 * tp::kMiB), tp::InvalidArgument);
    EXPECT_EQ(tp::memory::replay_memory_config(allocator, "cuda:0").device, "cuda:0");
  }
  EXPECT_EQ(tp::memory::replay_memory_config(ReplayAllocator::managed, "cuda:0").allocator,
            tp::memory::AllocatorKind::managed);
}

Trace small_random_trace() {
  tp::memory::RandomTraceOptions options;
  options.seed = 7;
  options.steps = 600;
  options.min_bytes = 4 * tp::kKiB;
  options.max_bytes = 512 * tp::kKiB;
  options.max_live_bytes = 8 * tp::kMiB;
  return tp::memory::generate_random_trace(options);
}

void expect_min_capacity_is_tight(const Trace& trace, ReplayAllocator allocator) {
  const tp::memory::MinCapacityResult found = tp::memory::find_min_capacity(trace, allocator);
  SCOPED_TRACE(std::string(tp::memory::to_string(allocator)));
  EXPECT_GE(found.capacity_bytes, trace.peak_live_bytes());
  EXPECT_LT(found.failing_bytes, found.capacity_bytes);
  EXPECT_LE(found.capacity_bytes - found.failing_bytes,
            std::max<std::size_t>(256 * tp::kKiB, found.capacity_bytes / 100));
  const auto fits = tp::memory::make_replay_stack(allocator, found.capacity_bytes);
  EXPECT_EQ(tp::memory::replay(trace, *fits).oom_count, 0u);
  const auto below = tp::memory::make_replay_stack(allocator, found.failing_bytes);
  EXPECT_GT(tp::memory::replay(trace, *below).oom_count, 0u);
}

TEST(FindMinCapacity, SystemAllocatorNeedsAboutThePeakOfLiveBytes) {
  const Trace trace = small_random_trace();
  expect_min_capacity_is_tight(trace, ReplayAllocator::system);
}

TEST(FindMinCapacity, BfcResultReplaysWithoutOomAndTheValueBelowDoesNot) {
  expect_min_capacity_is_tight(small_random_trace(), ReplayAllocator::bfc);
}

TEST(FindMinCapacity, ExpandableResultReplaysWithoutOomAndTheValueBelowDoesNot) {
  expect_min_capacity_is_tight(small_random_trace(), ReplayAllocator::expandable);
}

TEST(FindMinCapacity, WorksWithAnyFactoryAndStopsAtTheLowerBoundWhenItFits) {
  // A LimitingAdaptor counts requested bytes exactly: the minimum is the peak of live bytes itself.
  const Trace trace("exact", {alloc(0, 0x10, 1000), alloc(0, 0x20, 3000), release(0, 0x10, 1000), alloc(0, 0x30, 500),
                              release(0, 0x30, 500), release(0, 0x20, 3000)});
  tp::memory::HostResource host;
  tp::memory::MinCapacityOptions options;
  options.absolute_tolerance = 1;
  options.relative_tolerance = 0;
  const tp::memory::MinCapacityResult found = tp::memory::find_min_capacity(
      trace,
      [&host](std::size_t capacity) -> std::unique_ptr<MemoryResource> {
        return std::make_unique<tp::memory::LimitingAdaptor>(host, capacity);
      },
      options);
  EXPECT_EQ(found.capacity_bytes, 4000u);
  EXPECT_EQ(found.failing_bytes, 3999u);
  EXPECT_EQ(found.replays, 1u);
  EXPECT_EQ(tp::memory::find_min_capacity(Trace{}, ReplayAllocator::bfc).capacity_bytes, 0u);
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// The one-concern adaptors (limiting, statistics, tracking, failure callback), each over a scripted upstream
// that records what reaches it, so forwarding (tags, trim, reset_peak) and stats merging are visible.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/allocation_observer.hpp"
#include "tensorpool/memory/bfc_allocator.hpp"
#include "tensorpool/memory/failure_callback_adaptor.hpp"
#include "tensorpool/memory/limiting_adaptor.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"
#include "tensorpool/memory/statistics_adaptor.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"

namespace {

using tp::OutOfMemoryError;
using tp::memory::AllocationKind;
using tp::memory::AllocationTag;
using tp::memory::MemoryResource;
using tp::memory::MemoryStats;

AllocationTag tag(std::string name, AllocationKind kind = AllocationKind::activation) {
  AllocationTag result;
  result.name = std::move(name);
  result.op = "MatMul";
  result.kind = kind;
  return result;
}

// Scripted upstream: malloc-backed with a capacity (requested bytes), rounding to 256 in its stats, and a
// record of every tag, trim and reset_peak that reaches it. fail_next makes the next N requests fail.
class ScriptedResource final : public MemoryResource {
 public:
  explicit ScriptedResource(std::size_t capacity = 64 * tp::kMiB) : MemoryResource("scripted"), capacity_(capacity) {}
  ~ScriptedResource() override { EXPECT_EQ(live_.size(), 0u) << "leaked allocations"; }

  int fail_next = 0;
  std::vector<AllocationTag> tags_seen;
  int trims = 0;
  int peak_resets = 0;

  std::size_t in_use() const {
    const std::lock_guard lock(mutex_);
    return in_use_;
  }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& request_tag) override {
    const std::lock_guard lock(mutex_);
    tags_seen.push_back(request_tag);
    const std::size_t rounded = tp::memory::round_up(bytes, 256);
    if (fail_next > 0 || in_use_ + rounded > capacity_) {
      if (fail_next > 0) --fail_next;
      ++ooms_;
      tp::OutOfMemoryReport report;
      report.allocator = name();
      report.requested_bytes = bytes;
      report.rounded_bytes = rounded;
      report.request_tag = request_tag;
      report.limit_bytes = capacity_;
      report.in_use_bytes = in_use_;
      report.reserved_bytes = capacity_;
      report.largest_free_block = capacity_ - in_use_;
      throw OutOfMemoryError(report);
    }
    void* ptr = std::aligned_alloc(alignment, rounded);
    live_[ptr] = bytes;
    in_use_ += rounded;
    ++allocs_;
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override {
    const std::lock_guard lock(mutex_);
    auto found = live_.find(ptr);
    EXPECT_TRUE(found != live_.end());
    EXPECT_EQ(found->second, bytes);
    live_.erase(found);
    in_use_ -= tp::memory::round_up(bytes, 256);
    std::free(ptr);
  }
  std::size_t do_trim() override {
    ++trims;
    return 7;
  }
  MemoryStats do_stats() const override {
    const std::lock_guard lock(mutex_);
    MemoryStats stats;
    stats.bytes_in_use = in_use_;
    stats.bytes_reserved = capacity_;
    stats.largest_free_block = capacity_ - in_use_;
    stats.num_allocs = 1000 + allocs_;  // deliberately wrong: the statistics adaptor owns this
    stats.num_ooms = ooms_;
    stats.num_retries = 5;
    stats.upstream_allocs = 11;
    return stats;
  }
  void do_reset_peak() override { ++peak_resets; }

  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::map<void*, std::size_t> live_;
  std::size_t in_use_ = 0;
  std::uint64_t allocs_ = 0;
  std::uint64_t ooms_ = 0;
};

// --- LimitingAdaptor -----------------------------------------------------------------------------------

TEST(LimitingAdaptor, RefusesPastTheLimitWithAFullReport) {
  ScriptedResource upstream;
  tp::memory::LimitingAdaptor limiting(upstream, 1000);
  void* a = limiting.allocate(600, 256, tag("a"));
  void* b = limiting.allocate(400, 256, tag("b"));  // exactly at the limit
  EXPECT_EQ(limiting.outstanding_bytes(), 1000u);
  try {
    (void)limiting.allocate(1, 256, tag("c", AllocationKind::gradient));
    FAIL() << "allocated past the limit";
  } catch (const OutOfMemoryError& error) {
    const tp::OutOfMemoryReport& report = error.report();
    EXPECT_EQ(report.allocator, "limiting");
    EXPECT_EQ(report.requested_bytes, 1u);
    EXPECT_EQ(report.limit_bytes, 1000u);
    EXPECT_EQ(report.in_use_bytes, 1000u);
    EXPECT_EQ(report.request_tag.name, "c");
    EXPECT_FALSE(report.is_fragmentation());
    EXPECT_NE(std::string(error.what()).find("real shortage"), std::string::npos) << error.what();
  }
  EXPECT_EQ(upstream.tags_seen.size(), 2u) << "a refused request must not reach the upstream";
  const MemoryStats stats = limiting.stats();
  EXPECT_EQ(stats.bytes_limit, 1000u);
  EXPECT_EQ(stats.num_ooms, 1u);
  limiting.deallocate(a, 600);
  void* c = limiting.allocate(600, 256, tag("c"));  // usable again after the refusal
  limiting.deallocate(b, 400);
  limiting.deallocate(c, 600);
  EXPECT_EQ(limiting.outstanding_bytes(), 0u);
}

TEST(LimitingAdaptor, KeepsTheTighterLimitAndUndoesAFailedUpstreamRequest) {
  auto owned = std::make_unique<ScriptedResource>(4096);
  ScriptedResource& upstream = *owned;
  tp::memory::LimitingAdaptor limiting(std::move(owned), 1 << 20);
  EXPECT_EQ(limiting.stats().bytes_limit, 1u << 20);  // the scripted upstream reports none
  upstream.fail_next = 1;
  EXPECT_THROW((void)limiting.allocate(100), OutOfMemoryError);
  EXPECT_EQ(limiting.outstanding_bytes(), 0u);
  EXPECT_EQ(limiting.stats().num_ooms, 1u) << "the upstream's OOM, counted once (by the upstream)";
  void* ptr = limiting.allocate(100);
  limiting.deallocate(ptr, 100);
}

TEST(LimitingAdaptor, RejectsZeroLimitAndNullUpstream) {
  ScriptedResource upstream;
  EXPECT_THROW(tp::memory::LimitingAdaptor(upstream, 0), tp::InvalidArgument);
  EXPECT_THROW(tp::memory::LimitingAdaptor(std::unique_ptr<MemoryResource>{}, 10), tp::InvalidArgument);
}

TEST(LimitingAdaptor, ConcurrentRequestsNeverOvershoot) {
  ScriptedResource upstream(1 << 30);
  tp::memory::LimitingAdaptor limiting(upstream, 64 * 1000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&limiting] {
      std::vector<void*> held;
      for (int i = 0; i < 500; ++i) {
        try {
          held.push_back(limiting.allocate(1000));
          EXPECT_LE(limiting.outstanding_bytes(), 64u * 1000u);
        } catch (const OutOfMemoryError&) {}
        if (held.size() > 20) {
          for (void* ptr : held) limiting.deallocate(ptr, 1000);
          held.clear();
        }
      }
      for (void* ptr : held) limiting.deallocate(ptr, 1000);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(limiting.outstanding_bytes(), 0u);
}

// --- StatisticsAdaptor ---------------------------------------------------------------------------------

TEST(StatisticsAdaptor, OwnsCallerCountersAndTakesTheRestFromUpstream) {
  ScriptedResource upstream;
  tp::memory::StatisticsAdaptor statistics(upstream);
  void* a = statistics.allocate(1000, 256, tag("a"));
  void* b = statistics.allocate(300, 256, tag("b"));
  MemoryStats stats = statistics.stats();
  EXPECT_EQ(stats.bytes_requested, 1300u);
  EXPECT_EQ(stats.peak_bytes_requested, 1300u);
  EXPECT_EQ(stats.num_allocs, 2u);
  EXPECT_EQ(stats.largest_alloc, 1000u);
  EXPECT_EQ(stats.bytes_in_use, 1024u + 512u) << "rounded in-use comes from the upstream";
  EXPECT_EQ(stats.bytes_reserved, 64 * tp::kMiB);
  EXPECT_EQ(stats.num_retries, 5u);
  EXPECT_EQ(stats.upstream_allocs, 11u);
  statistics.deallocate(a, 1000);
  stats = statistics.stats();
  EXPECT_EQ(stats.bytes_requested, 300u);
  EXPECT_EQ(stats.peak_bytes_requested, 1300u);
  EXPECT_EQ(stats.num_frees, 1u);
  statistics.reset_peak();
  EXPECT_EQ(statistics.stats().peak_bytes_requested, 300u);
  EXPECT_EQ(upstream.peak_resets, 1);
  EXPECT_EQ(statistics.trim(), 7u);
  EXPECT_EQ(upstream.trims, 1);
  statistics.deallocate(b, 300);
  EXPECT_EQ(statistics.stats().bytes_requested, 0u);
}

TEST(StatisticsAdaptor, CountsOomsPassingThroughAndRethrows) {
  ScriptedResource upstream(1024);
  tp::memory::StatisticsAdaptor statistics(upstream);
  EXPECT_THROW((void)statistics.allocate(4096, 256, tag("big")), OutOfMemoryError);
  upstream.fail_next = 1;
  EXPECT_THROW((void)statistics.allocate(16), std::bad_alloc);
  const MemoryStats stats = statistics.stats();
  EXPECT_EQ(stats.num_ooms, 2u);
  EXPECT_EQ(stats.num_allocs, 0u);
  EXPECT_EQ(stats.bytes_requested, 0u);
  EXPECT_THROW((void)statistics.allocate(0), tp::InvalidArgument);
  EXPECT_EQ(statistics.stats().num_ooms, 2u) << "an invalid request is not an OOM";
}

TEST(StatisticsAdaptor, ThreadSafeCounters) {
  ScriptedResource upstream(1 << 30);
  tp::memory::StatisticsAdaptor statistics(upstream);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&statistics] {
      for (int i = 0; i < 1000; ++i) statistics.deallocate(statistics.allocate(64), 64);
    });
  }
  for (std::thread& thread : threads) thread.join();
  const MemoryStats stats = statistics.stats();
  EXPECT_EQ(stats.num_allocs, 4000u);
  EXPECT_EQ(stats.num_frees, 4000u);
  EXPECT_EQ(stats.bytes_requested, 0u);
  EXPECT_GE(stats.peak_bytes_requested, 64u);
  EXPECT_LE(stats.peak_bytes_requested, 4u * 64u);
}

// More threads than shards, in two waves (the second reuses the indices the first gave back at exit), some
// allocating in one thread and freeing in another: the sums over the shards are exact.
TEST(StatisticsAdaptor, CountsStayExactBeyondTheShardsAndAcrossThreadExits) {
  ScriptedResource upstream(1 << 30);
  tp::memory::StatisticsAdaptor statistics(upstream);
  constexpr int kThreads = static_cast<int>(tp::memory::StatisticsAdaptor::kShards) + 6;
  std::vector<void*> handed_over(2 * kThreads, nullptr);
  for (int wave = 0; wave < 2; ++wave) {
    std::latch all_counting(kThreads);  // every thread holds its shard (or the shared one) at once
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&statistics, &handed_over, &all_counting, wave, t] {
        const std::size_t bytes = 64 + static_cast<std::size_t>(t);
        statistics.deallocate(statistics.allocate(bytes), bytes);
        all_counting.arrive_and_wait();
        for (int i = 1; i < 50; ++i) statistics.deallocate(statistics.allocate(bytes), bytes);
        handed_over[static_cast<std::size_t>(wave * kThreads + t)] = statistics.allocate(bytes);
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (int i = 0; i < 2 * kThreads; ++i) {
    statistics.deallocate(handed_over[static_cast<std::size_t>(i)], 64 + static_cast<std::size_t>(i % kThreads));
  }
  const MemoryStats stats = statistics.stats();
  EXPECT_EQ(stats.num_allocs, 2u * kThreads * 51u);
  EXPECT_EQ(stats.num_frees, 2u * kThreads * 51u);
  EXPECT_EQ(stats.largest_alloc, 64u + kThreads - 1u);
  EXPECT_EQ(stats.bytes_requested, 0u);
}

// Over an allocator that counts requests exactly (BFC, as a stack without a thread cache has it), the adaptor
// that takes its counters from upstream reports what the one counting them itself reports, OOMs and peak
// resets included. Fixed seed: a failure reproduces.
TEST(StatisticsAdaptor, TakesRequestCountsFromAnUpstreamThatCountsThemExactly) {
  auto make_bfc = [] {
    tp::memory::BfcOptions options;
    options.limit_bytes = 8 * tp::kMiB;
    return std::make_unique<tp::memory::BfcAllocator>(std::make_unique<tp::memory::SimDeviceMemory>(8 * tp::kMiB),
                                                      options);
  };
  tp::memory::StatisticsAdaptor own(make_bfc());
  tp::memory::StatisticsAdaptor taken(make_bfc(), "statistics", tp::memory::RequestCounts::upstream);
  std::mt19937 random(23);
  std::vector<std::pair<std::size_t, std::pair<void*, void*>>> live;
  auto same = [&] {
    const MemoryStats a = own.stats();
    const MemoryStats b = taken.stats();
    EXPECT_EQ(a.bytes_requested, b.bytes_requested);
    EXPECT_EQ(a.peak_bytes_requested, b.peak_bytes_requested);
    EXPECT_EQ(a.num_allocs, b.num_allocs);
    EXPECT_EQ(a.num_frees, b.num_frees);
    EXPECT_EQ(a.largest_alloc, b.largest_alloc);
    EXPECT_EQ(a.num_ooms, b.num_ooms);
  };
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || random() % 2 == 0) {
      const std::size_t bytes = 1 + random() % (3 * tp::kMiB);
      void* a = nullptr;
      void* b = nullptr;
      try {
        a = own.allocate(bytes);
      } catch (const OutOfMemoryError&) {}
      try {
        b = taken.allocate(bytes);
      } catch (const OutOfMemoryError&) {}
      ASSERT_EQ(a == nullptr, b == nullptr) << "step " << step << ": the two BFCs place alike";
      if (a != nullptr) live.push_back({bytes, {a, b}});
    } else {
      const std::size_t index = random() % live.size();
      own.deallocate(live[index].second.first, live[index].first);
      taken.deallocate(live[index].second.second, live[index].first);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(index));
    }
    if (step % 500 == 0) {
      own.reset_peak();
      taken.reset_peak();
    }
    if (step % 97 == 0) {
      SCOPED_TRACE(step);
      same();
    }
  }
  for (const auto& [bytes, blocks] : live) {
    own.deallocate(blocks.first, bytes);
    taken.deallocate(blocks.second, bytes);
  }
  same();
  EXPECT_GT(taken.stats().num_ooms, 0u) << "the sequence reaches the limit";
  EXPECT_EQ(taken.stats().bytes_requested, 0u);
}

// --- TrackingAdaptor -----------------------------------------------------------------------------------

class RecordingObserver final : public tp::memory::AllocationObserver {
 public:
  std::vector<std::string> events;
  void on_allocate(void*, std::size_t bytes, const AllocationTag& request_tag) noexcept override {
    events.push_back("+" + request_tag.name + ":" + std::to_string(bytes));
  }
  void on_deallocate(void*, std::size_t bytes) noexcept override { events.push_back("-" + std::to_string(bytes)); }
  void on_relocate(void*, void*, std::size_t bytes) noexcept override { events.push_back("~" + std::to_string(bytes)); }
};

TEST(TrackingAdaptor, RecordsLiveAllocationsWithTagsAndForwardsTags) {
  ScriptedResource upstream;
  tp::memory::TrackingAdaptor tracking(upstream);
  void* a = tracking.allocate(100, 256, tag("a", AllocationKind::parameter));
  void* b = tracking.allocate(5000, 256, tag("b"));
  void* c = tracking.allocate(300, 256, tag("c"));
  ASSERT_EQ(upstream.tags_seen.size(), 3u);
  EXPECT_EQ(upstream.tags_seen[0].name, "a");
  EXPECT_EQ(upstream.tags_seen[0].kind, AllocationKind::parameter);

  EXPECT_EQ(tracking.live_count(), 3u);
  const std::vector<tp::memory::TrackedAllocation> live = tracking.live_allocations();
  ASSERT_EQ(live.size(), 3u);
  EXPECT_EQ(live[0].ptr, a);
  EXPECT_EQ(live[0].tag.name, "a");
  EXPECT_EQ(live[0].sequence, 0u);
  EXPECT_EQ(live[2].sequence, 2u);
  EXPECT_EQ(live[1].bytes, 5000u);
  EXPECT_EQ(live[0].thread, std::this_thread::get_id());
  EXPECT_LE(live[0].time_ns, live[2].time_ns);

  const std::vector<tp::memory::TrackedAllocation> largest = tracking.largest_live(2);
  ASSERT_EQ(largest.size(), 2u);
  EXPECT_EQ(largest[0].tag.name, "b");
  EXPECT_EQ(largest[1].tag.name, "c");
  EXPECT_EQ(tracking.largest_live(10).size(), 3u);

  tracking.deallocate(b, 5000);
  EXPECT_EQ(tracking.live_count(), 2u);
  EXPECT_EQ(tracking.largest_live(1)[0].tag.name, "c");
  tracking.deallocate(a, 100);
  tracking.deallocate(c, 300);
  EXPECT_EQ(tracking.live_count(), 0u);
  EXPECT_EQ(tracking.trim(), 7u);
}

TEST(TrackingAdaptor, AmendsOomReportWithLargestLiveTags) {
  ScriptedResource upstream(256 * 20);
  tp::memory::TrackingAdaptor tracking(upstream);
  std::vector<void*> held;
  for (int i = 0; i < 12; ++i) {
    held.push_back(tracking.allocate(static_cast<std::size_t>(100 + i), 256, tag("tensor_" + std::to_string(i))));
  }
  try {
    (void)tracking.allocate(256 * 10, 256, tag("too_big"));
    FAIL() << "expected an OOM";
  } catch (const OutOfMemoryError& error) {
    const tp::OutOfMemoryReport& report = error.report();
    ASSERT_EQ(report.largest_live.size(), tp::memory::TrackingAdaptor::kReportedLiveAllocations);
    EXPECT_EQ(report.largest_live[0].tag.name, "tensor_11");
    EXPECT_EQ(report.largest_live[0].bytes, 111u);
    EXPECT_EQ(report.largest_live[9].tag.name, "tensor_2");
    const std::string text = error.what();
    EXPECT_NE(text.find("Largest live allocations"), std::string::npos) << text;
    EXPECT_NE(text.find("tensor_11 (MatMul, activation)"), std::string::npos) << text;
    EXPECT_EQ(text.find("tensor_1 "), std::string::npos) << "only the 10 largest: " << text;
    EXPECT_NE(text.find("too_big"), std::string::npos) << text;
  }
  EXPECT_EQ(tracking.live_count(), 12u);
  for (int i = 0; i < 12; ++i)
    tracking.deallocate(held[static_cast<std::size_t>(i)], static_cast<std::size_t>(100 + i));
}

TEST(TrackingAdaptor, ObserversSeeEveryAllocationAndFreeInOrder) {
  ScriptedResource upstream;
  tp::memory::TrackingAdaptor tracking(upstream);
  RecordingObserver observer;
  tracking.add_observer(observer);
  tracking.add_observer(observer);  // no-op
  void* a = tracking.allocate(10, 256, tag("x"));
  tracking.deallocate(a, 10);
  upstream.fail_next = 1;
  EXPECT_THROW((void)tracking.allocate(20, 256, tag("failed")), OutOfMemoryError);
  tracking.remove_observer(observer);
  void* b = tracking.allocate(30, 256, tag("unseen"));
  tracking.deallocate(b, 30);
  EXPECT_EQ(observer.events, (std::vector<std::string>{"+x:10", "-10"}));
}

TEST(TrackingAdaptor, ThreadSafe) {
  ScriptedResource upstream(1 << 30);
  tp::memory::TrackingAdaptor tracking(upstream);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&tracking, t] {
      std::vector<void*> held;
      for (int i = 0; i < 300; ++i) {
        held.push_back(tracking.allocate(64, 256, tag("t" + std::to_string(t))));
        if (i % 3 == 0) (void)tracking.largest_live(3);
      }
      for (void* ptr : held) tracking.deallocate(ptr, 64);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(tracking.live_count(), 0u);
}

// --- FailureCallbackAdaptor ----------------------------------------------------------------------------

TEST(FailureCallbackAdaptor, RetriesWhileTheCallbackFreesMemory) {
  ScriptedResource upstream;
  std::vector<std::size_t> asked;
  tp::memory::FailureCallbackAdaptor adaptor(upstream, [&](std::size_t bytes) {
    asked.push_back(bytes);
    return true;
  });
  upstream.fail_next = 2;
  void* ptr = adaptor.allocate(128, 256, tag("retry"));
  EXPECT_EQ(asked, (std::vector<std::size_t>{128, 128}));
  EXPECT_EQ(adaptor.stats().num_retries, 5u + 2u);  // upstream's 5 plus ours
  ASSERT_EQ(upstream.tags_seen.size(), 3u);
  EXPECT_EQ(upstream.tags_seen[2].name, "retry");
  adaptor.deallocate(ptr, 128);
}

TEST(FailureCallbackAdaptor, RethrowsWhenTheCallbackGivesUp) {
  ScriptedResource upstream;
  int calls = 0;
  tp::memory::FailureCallbackAdaptor adaptor(upstream, [&](std::size_t) {
    ++calls;
    return false;
  });
  upstream.fail_next = 1;
  EXPECT_THROW((void)adaptor.allocate(64), OutOfMemoryError);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(adaptor.stats().num_retries, 5u);
}

TEST(FailureCallbackAdaptor, BoundsTheRetries) {
  ScriptedResource upstream(1024);  // the request can never fit
  int calls = 0;
  tp::memory::FailureCallbackAdaptor adaptor(
      upstream,
      [&](std::size_t) {
        ++calls;
        return true;
      },
      2);
  try {
    (void)adaptor.allocate(4096);
    FAIL() << "expected an OOM";
  } catch (const OutOfMemoryError& error) {
    EXPECT_NE(std::string(error.what()).find("freed memory 2 time(s)"), std::string::npos) << error.what();
  }
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(upstream.tags_seen.size(), 3u);
  EXPECT_EQ(adaptor.stats().num_retries, 5u + 2u);
  EXPECT_THROW(tp::memory::FailureCallbackAdaptor(upstream, nullptr), tp::InvalidArgument);
}

TEST(FailureCallbackAdaptor, CallbackMayFreeThroughTheSameStack) {
  ScriptedResource upstream(1024);
  tp::memory::StatisticsAdaptor statistics(upstream);
  std::vector<void*> cache;
  tp::memory::FailureCallbackAdaptor adaptor(statistics, [&](std::size_t) {
    if (cache.empty()) return false;
    for (void* ptr : cache) statistics.deallocate(ptr, 256);
    cache.clear();
    return true;
  });
  for (int i = 0; i < 4; ++i) cache.push_back(adaptor.allocate(256));
  void* ptr = adaptor.allocate(512);  // fits only after the callback drops the cache
  EXPECT_TRUE(cache.empty());
  adaptor.deallocate(ptr, 512);
  EXPECT_EQ(statistics.stats().bytes_requested, 0u);
}

// --- Composition ---------------------------------------------------------------------------------------

TEST(Adaptors, ComposeOwningTheirUpstreams) {
  auto scripted = std::make_unique<ScriptedResource>();
  ScriptedResource& upstream = *scripted;
  auto limiting = std::make_unique<tp::memory::LimitingAdaptor>(std::move(scripted), 4096);
  auto tracking = std::make_unique<tp::memory::TrackingAdaptor>(std::move(limiting));
  tp::memory::TrackingAdaptor& tracker = *tracking;
  tp::memory::StatisticsAdaptor statistics(std::move(tracking));

  void* a = statistics.allocate(3000, 256, tag("weights", AllocationKind::parameter));
  try {
    (void)statistics.allocate(2000, 256, tag("activations"));
    FAIL() << "expected the limit to refuse";
  } catch (const OutOfMemoryError& error) {
    EXPECT_EQ(error.report().allocator, "limiting");
    ASSERT_EQ(error.report().largest_live.size(), 1u);
    EXPECT_EQ(error.report().largest_live[0].tag.name, "weights");
  }
  const MemoryStats stats = statistics.stats();
  EXPECT_EQ(stats.num_ooms, 1u);
  EXPECT_EQ(stats.num_allocs, 1u);
  EXPECT_EQ(stats.bytes_limit, 4096u);
  EXPECT_EQ(tracker.live_count(), 1u);
  EXPECT_EQ(upstream.tags_seen.at(0).name, "weights");
  statistics.reset_peak();
  EXPECT_EQ(upstream.peak_resets, 1);
  statistics.deallocate(a, 3000);
}

}  // namespace

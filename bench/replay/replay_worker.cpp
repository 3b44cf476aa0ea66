// SPDX-License-Identifier: Apache-2.0
// tp_replay_worker: replays one allocation trace with one allocator and prints one JSON line.
//
// Built three times from this file: linked as is (glibc malloc), with jemalloc and with mimalloc (both
// replace malloc/free for the whole process), so `--allocator malloc` measures whichever malloc the binary
// got; the report names the library that actually provides `malloc`. `--allocator bfc|bfc-grow|expandable`
// replays through one of our memory stacks over a simulated device (make_sim_device_memory_stack);
// --bfc-split, --policy and --release-decay-events change the stack's MemoryConfig (e.g. `--allocator
// expandable --policy grow`, the default stack for unplanned memory; `--allocator bfc --bfc-split exact`;
// `--release-decay-events 0` for the grow arena's release policy before cached granules decayed).
//
// Modes:
//   latency    --rounds N times the trace in event order, single-threaded; each round is timed as a whole
//              (no per-operation timer, no memory touched): ns per allocate+free pair = round time /
//              allocations. Round 1 is "cold" (the allocator grows); the rest are "warm".
//              --threads T replays the trace in T threads at once on one allocator, each thread with its
//              own slots (a stream per thread, as a device has a worker thread per stream); each thread's
//              rounds are timed as above and warm_ns_per_pair is the slowest thread's warm median. After the
//              timed rounds, one more round per thread times each allocate and each free alone (two
//              steady_clock reads per operation) and reports the median and p99 of the allocate+free pair
//              latency over all pairs of all threads: pair_p50_ns / pair_p99_ns with the clock reads' cost
//              included, pair_net_p50_ns / pair_net_p99_ns less two empty intervals (clock_overhead_ns: the
//              median of back-to-back steady_clock reads, measured by each thread just before its timed pairs).
//   footprint  one round that writes one byte per 4 KiB of every allocation; reports the peak RSS above the
//              RSS just before the replay and, for our stacks, peak_bytes_reserved from stats(). With
//              --compact-before-growth (expandable) the round's slots are the arena's relocator: a request that
//              would grow the arena may move live blocks first (MemoryConfig::compact_before_growth), each slot
//              following its block, and every block's bytes are checked at its free; --compaction-slack sets
//              how much free room inside the reservation growth may leave before the arena compacts.
//   min-capacity  (our stacks only) the smallest device capacity on which the trace replays without an
//              out-of-memory error (find_min_capacity of the replay library; with --compact-before-growth its
//              probes compact before growth and on a refusal).
// The expandable stacks report what reclaiming before growth did (growth_requests, compactions_before_growth,
// evacuations, growth_avoided, blocks_moved, bytes_copied, bytes_remapped). --flush-before-growth is refused:
// the expandable stacks have no thread caches to flush any more (MemoryStack).

// GCC 12 at -O2 reports a "potential null pointer dereference" inside CLI11's string splitting (inlined
// std::string moves in CLI::detail::split): a false positive in library code, silenced for that header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <CLI/CLI.hpp>
#pragma GCC diagnostic pop

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "our_stacks.hpp"
#include "process_memory.hpp"
#include "replay_plan.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/sharded_arena.hpp"
#include "tensorpool/memory/trace.hpp"

namespace {

using tp::bench::ReplayPlan;

struct MallocAllocator {
  void* allocate(std::size_t bytes) {
    void* ptr = std::malloc(bytes);
    if (ptr == nullptr) throw std::bad_alloc();
    return ptr;
  }
  void deallocate(void* ptr, std::size_t /*bytes*/) noexcept { std::free(ptr); }
};

struct StackAllocator {
  tp::memory::MemoryResource& resource;
  // Callers pass a tag they already have: the replay does not build an empty one per request.
  const tp::memory::AllocationTag tag;
  void* allocate(std::size_t bytes) { return resource.allocate(bytes, tp::memory::kDefaultAlignment, tag); }
  void deallocate(void* ptr, std::size_t bytes) noexcept { resource.deallocate(ptr, bytes); }
};

double ns_per_pair(std::chrono::nanoseconds elapsed, const ReplayPlan& plan) {
  return plan.allocations == 0 ? 0.0 : static_cast<double>(elapsed.count()) / static_cast<double>(plan.allocations);
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2.0;
}

// One round with each operation timed alone: the allocate+free latency of every pair the round frees, in ns.
template <typename Allocator>
void time_pairs(const ReplayPlan& plan, Allocator& allocator, std::vector<double>& pairs) {
  using Clock = std::chrono::steady_clock;
  std::vector<void*> slots(plan.slot_count, nullptr);
  std::vector<Clock::duration> allocate_time(plan.slot_count);
  for (const tp::bench::ReplayOp& op : plan.ops) {
    const auto start = Clock::now();
    if (op.allocate) {
      slots[op.slot] = allocator.allocate(op.size);
      allocate_time[op.slot] = Clock::now() - start;
    } else {
      allocator.deallocate(slots[op.slot], op.size);
      const auto free_time = Clock::now() - start;
      pairs.push_back(static_cast<double>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(allocate_time[op.slot] + free_time).count()));
    }
  }
  for (const tp::bench::ReplayOp& op : plan.leftovers) allocator.deallocate(slots[op.slot], op.size);
}

// What a timed interval costs with nothing in it: the median of `samples` back-to-back steady_clock reads, in
// ns. Each operation time_pairs() times carries one such interval (its two reads), so a pair carries two.
double clock_overhead_ns(int samples) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> empty;
  empty.reserve(static_cast<std::size_t>(samples));
  for (int i = 0; i < samples; ++i) {
    const auto start = Clock::now();
    const auto stop = Clock::now();
    empty.push_back(static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start).count()));
  }
  return median(std::move(empty));
}

double percentile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

template <typename Allocator>
void measure_latency(const ReplayPlan& plan, Allocator& allocator, int rounds, int threads, nlohmann::json& report) {
  std::vector<std::vector<double>> per_round(static_cast<std::size_t>(threads));
  std::vector<std::vector<double>> pairs(static_cast<std::size_t>(threads));
  std::vector<double> overhead(static_cast<std::size_t>(threads));
  std::atomic<int> ready{0};
  auto replay = [&](std::size_t thread) {
    std::vector<void*> slots(plan.slot_count, nullptr);
    // Start together, so the threads' timed rounds overlap.
    ready.fetch_add(1);
    while (ready.load() < threads) std::this_thread::yield();
    for (int round = 0; round < rounds; ++round) {
      per_round[thread].push_back(ns_per_pair(tp::bench::replay_round<false>(plan, slots, allocator), plan));
    }
    overhead[thread] = clock_overhead_ns(10001);
    time_pairs(plan, allocator, pairs[thread]);
  };
  if (threads == 1) {
    replay(0);
  } else {
    std::vector<std::thread> workers;
    for (std::size_t thread = 0; thread < per_round.size(); ++thread) workers.emplace_back(replay, thread);
    for (std::thread& worker : workers) worker.join();
  }
  std::vector<double> warm;
  std::vector<double> all_pairs;
  for (std::size_t thread = 0; thread < per_round.size(); ++thread) {
    const std::vector<double>& rounds_of = per_round[thread];
    warm.push_back(rounds_of.size() > 1 ? median(std::vector<double>(rounds_of.begin() + 1, rounds_of.end()))
                                        : rounds_of.front());
    all_pairs.insert(all_pairs.end(), pairs[thread].begin(), pairs[thread].end());
  }
  report["threads"] = threads;
  report["round_ns_per_pair"] = per_round.front();
  report["cold_ns_per_pair"] = per_round.front().front();
  report["thread_warm_ns_per_pair"] = warm;
  report["warm_ns_per_pair"] = *std::max_element(warm.begin(), warm.end());
  report["pair_p50_ns"] = percentile(all_pairs, 0.50);
  report["pair_p99_ns"] = percentile(all_pairs, 0.99);
  // The same pairs less their two clock intervals' own cost (the median empty interval of the slower-clocked
  // thread), floored at 0: the allocator's share of a pair, what the round figures measure without a timer.
  const double clock_ns = *std::max_element(overhead.begin(), overhead.end());
  std::vector<double> net_pairs;
  net_pairs.reserve(all_pairs.size());
  for (const double pair : all_pairs) net_pairs.push_back(std::max(0.0, pair - 2.0 * clock_ns));
  report["clock_overhead_ns"] = clock_ns;
  report["pair_net_p50_ns"] = percentile(net_pairs, 0.50);
  report["pair_net_p99_ns"] = percentile(std::move(net_pairs), 0.99);
}

template <typename Allocator>
void measure_footprint(const ReplayPlan& plan, Allocator& allocator, nlohmann::json& report) {
  std::vector<void*> slots(plan.slot_count, nullptr);
  const bool reset = tp::bench::reset_peak_rss();
  const std::size_t rss_before = tp::bench::current_rss_bytes();
  const std::size_t max_rss_before = tp::bench::max_rss_bytes();
  const auto elapsed = tp::bench::replay_round<true>(plan, slots, allocator);
  const std::size_t peak = tp::bench::peak_rss_bytes();
  const std::size_t max_rss = tp::bench::max_rss_bytes();
  report["peak_rss_reset"] = reset;
  report["rss_before_bytes"] = rss_before;
  // VmHWM restarted just before the replay: exact. ru_maxrss counts from process start: an upper bound.
  report["peak_rss_bytes"] = (reset && peak > rss_before) ? peak - rss_before : 0;
  report["ru_maxrss_bytes"] = max_rss > rss_before ? max_rss - rss_before : 0;
  report["ru_maxrss_before_bytes"] = max_rss_before;
  report["touch_ns_per_pair"] = ns_per_pair(elapsed, plan);
}

// A footprint round's slots as the arena's relocator: compaction before growth moves blocks from inside allocate
// (the round is single-threaded, so no block is in use then) and each slot follows its block.
class SlotRelocator final : public tp::memory::Relocator {
 public:
  explicit SlotRelocator(std::vector<void*>& slots) : slots_(slots) { slot_of_.reserve(slots.size()); }
  void add(const void* ptr, std::uint32_t slot) { slot_of_.emplace(ptr, slot); }
  void remove(const void* ptr) noexcept { slot_of_.erase(ptr); }
  bool can_move(const void* ptr, std::size_t /*bytes*/) override { return slot_of_.contains(ptr); }
  void relocated(void* from, void* to, std::size_t /*bytes*/) noexcept override {
    auto node = slot_of_.extract(from);  // reuses the node: no allocation
    if (node.empty()) return;
    slots_[node.mapped()] = to;
    node.key() = to;
    slot_of_.insert(std::move(node));
  }

 private:
  std::vector<void*>& slots_;
  std::unordered_map<const void*, std::uint32_t> slot_of_;
};

// Each block's first and last 8 bytes hold its slot and size: a move that loses or mixes bytes reads back wrong.
void stamp(void* ptr, std::size_t size, std::uint64_t slot) noexcept {
  const std::uint64_t words[2] = {slot ^ 0x5bd1e995ULL, size};
  std::memcpy(ptr, &words[0], std::min<std::size_t>(8, size));
  if (size >= 16) std::memcpy(static_cast<char*>(ptr) + size - 8, &words[1], 8);
}
bool stamped(const void* ptr, std::size_t size, std::uint64_t slot) noexcept {
  const std::uint64_t words[2] = {slot ^ 0x5bd1e995ULL, size};
  if (std::memcmp(ptr, &words[0], std::min<std::size_t>(8, size)) != 0) return false;
  return size < 16 || std::memcmp(static_cast<const char*>(ptr) + size - 8, &words[1], 8) == 0;
}

// The footprint round with compaction before growth: the round of replay_round<true>, its slots registered as
// the arena's relocator, every block stamped at its allocation and checked at its free. Untimed.
void measure_footprint_moving(const ReplayPlan& plan, StackAllocator& allocator, tp::memory::ExpandableArena& arena,
                              nlohmann::json& report) {
  std::vector<void*> slots(plan.slot_count, nullptr);
  SlotRelocator relocator(slots);
  arena.set_relocator(&relocator);
  std::size_t damaged = 0;
  for (const tp::bench::ReplayOp& op : plan.ops) {
    if (op.allocate) {
      void* ptr = allocator.allocate(op.size);
      tp::bench::touch_pages(ptr, op.size);
      stamp(ptr, op.size, op.slot);
      slots[op.slot] = ptr;
      relocator.add(ptr, op.slot);
    } else {
      if (!stamped(slots[op.slot], op.size, op.slot)) ++damaged;
      relocator.remove(slots[op.slot]);
      allocator.deallocate(slots[op.slot], op.size);
    }
  }
  for (const tp::bench::ReplayOp& op : plan.leftovers) {
    relocator.remove(slots[op.slot]);
    allocator.deallocate(slots[op.slot], op.size);
  }
  arena.set_relocator(nullptr);
  report["damaged_blocks"] = damaged;
  if (damaged != 0) throw std::runtime_error(std::to_string(damaged) + " blocks read back wrong after moves");
}

int run(const std::string& trace_path, const std::string& allocator_name, const std::string& mode, int rounds,
        int threads, double capacity_factor, const tp::bench::OurStackOptions& stack_options) {
  const tp::memory::Trace trace = tp::memory::read_trace_file(trace_path);
  const ReplayPlan plan = tp::bench::compile_plan(trace);
  const std::string library = tp::bench::malloc_library();

  nlohmann::json report;
  report["trace"] = std::filesystem::path(trace_path).stem().string();
  report["allocator"] = allocator_name;
  report["mode"] = mode;
  report["malloc_library"] = library;
  report["malloc_impl"] = tp::bench::malloc_implementation(library);
  report["events"] = trace.size();
  report["allocations"] = plan.allocations;
  report["peak_live_bytes"] = plan.peak_live_bytes;

  if (allocator_name == "malloc") {
    MallocAllocator allocator;
    if (mode == "latency") {
      measure_latency(plan, allocator, rounds, threads, report);
    } else if (mode == "footprint") {
      measure_footprint(plan, allocator, report);
    } else {
      std::cerr << "tp_replay_worker: mode " << mode << " needs one of our allocators\n";
      return 2;
    }
  } else if (mode == "min-capacity") {
    report["min_capacity_bytes"] = tp::bench::our_min_capacity(trace, allocator_name, stack_options);
  } else {
    // Each thread replays the whole trace: the device holds `threads` times its live bytes.
    const std::size_t capacity =
        tp::bench::device_capacity(plan.peak_live_bytes * static_cast<std::size_t>(threads), capacity_factor);
    auto stack = tp::bench::make_our_stack(allocator_name, capacity, stack_options);
    StackAllocator allocator{*stack, {}};
    report["capacity_bytes"] = capacity;
    report["limit_bytes"] = stack->limit_bytes();
    if (stack_options.split_threshold) report["split_threshold"] = *stack_options.split_threshold;
    // The cache's bound when the stack built one (not over TensorFlow's BFC or the expandable arena), else 0.
    report["thread_cache_bytes"] = stack->thread_cache() != nullptr ? stack->config().thread_cache_bytes : 0;
    report["tracking"] = stack->config().tracking;
    report["policy"] = stack->config().policy == tp::memory::GrowthPolicy::grow ? "grow" : "preallocate";
    report["bfc_split"] = std::string(tp::memory::to_string(stack->config().bfc_split));
    report["arena_shards"] = stack->config().arena_shards;
    if (const auto* arena = dynamic_cast<const tp::memory::ExpandableArena*>(&stack->allocator())) {
      report["release_decay_events"] = arena->options().release_decay_events;
      report["reuse_bytes"] = arena->options().reuse_bytes;
    }
    auto* arena = dynamic_cast<tp::memory::ExpandableArena*>(&stack->allocator());
    if (mode == "latency") {
      measure_latency(plan, allocator, rounds, threads, report);
    } else if (stack_options.compact_before_growth && arena != nullptr) {
      measure_footprint_moving(plan, allocator, *arena, report);
    } else {
      measure_footprint(plan, allocator, report);
    }
    if (arena != nullptr) {
      const tp::memory::ReuseStats reuse = arena->reuse_stats();
      report["reuse_keeps"] = reuse.keeps;
      report["reuse_hits"] = reuse.hits;
      report["reuse_flushes"] = reuse.flushes;
      report["reuse_pauses"] = reuse.pauses;
      const tp::memory::GrowthPressureStats growth = arena->growth_pressure_stats();
      report["compact_before_growth"] = arena->options().compact_before_growth;
      report["compaction_slack"] = arena->options().compaction_slack;
      report["growth_requests"] = growth.growth_requests;
      report["compactions_before_growth"] = growth.compactions;
      report["evacuations"] = growth.evacuations;
      report["growth_avoided"] = growth.growth_avoided;
      report["blocks_moved"] = growth.blocks_moved;
      report["bytes_copied"] = growth.bytes_copied;
      report["bytes_remapped"] = growth.bytes_remapped;
    }
    if (const auto* sharded = dynamic_cast<const tp::memory::ShardedArena*>(&stack->allocator())) {
      const tp::memory::ReuseStats reuse = sharded->reuse_stats();
      report["reuse_keeps"] = reuse.keeps;
      report["reuse_hits"] = reuse.hits;
      report["reuse_flushes"] = reuse.flushes;
      report["reuse_pauses"] = reuse.pauses;
    }
    const tp::memory::MemoryStats stats = stack->stats();
    report["peak_reserved_bytes"] = stats.peak_bytes_reserved;
    report["peak_in_use_bytes"] = stats.peak_bytes_in_use;
    report["num_retries"] = stats.num_retries;
    report["upstream_allocs"] = stats.upstream_allocs;
  }
  std::cout << report.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tp_replay_worker: replays one allocation trace with one allocator, prints one JSON line"};
  std::string trace_path;
  std::string allocator_name = "malloc";
  std::string mode = "latency";
  int rounds = 5;
  int threads = 1;
  double capacity_factor = tp::bench::kDefaultCapacityFactor;
  tp::bench::OurStackOptions stack_options;
  app.add_option("--trace", trace_path, "RMM-format CSV trace")->required()->check(CLI::ExistingFile);
  app.add_option("--allocator", allocator_name, "malloc (this binary's malloc) or one of our stacks")
      ->check(CLI::IsMember({"malloc", "bfc", "bfc-grow", "expandable"}));
  app.add_option("--mode", mode, "what to measure")->check(CLI::IsMember({"latency", "footprint", "min-capacity"}));
  app.add_option("--rounds", rounds, "latency rounds (the first is cold)")->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads, "latency: threads replaying the trace at once on one allocator")
      ->check(CLI::Range(1, 64));
  app.add_option("--capacity-factor", capacity_factor, "simulated device capacity / trace peak live bytes")
      ->check(CLI::Range(1.0, 1024.0));
  app.add_option("--split-threshold", stack_options.split_threshold,
                 "BFC split threshold in bytes (tuning experiments; default: MemoryConfig's)");
  app.add_option("--thread-cache", stack_options.thread_cache_bytes,
                 "per-thread cache of freed small blocks in bytes, 0 = off (default: MemoryConfig's; only stacks over"
                 " bfc --bfc-split exact build one)");
  std::string flush_before_growth;
  app.add_option("--flush-before-growth", flush_before_growth, "removed: refused with the reason");
  app.add_flag("--compact-before-growth", stack_options.compact_before_growth,
               "our expandable stacks, footprint and min-capacity: the arena may move live blocks before it grows");
  app.add_option("--compaction-slack", stack_options.compaction_slack,
                 "with --compact-before-growth: free bytes inside the reservation, as a fraction of the in-use bytes,"
                 " that growth may leave before the arena compacts (default: MemoryConfig's)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--tracking", stack_options.tracking, "our stacks: with the tracking adaptor (per-allocation records)");
  std::string bfc_split;
  std::string policy;
  app.add_option("--bfc-split", bfc_split, "our bfc stacks: BFC split policy (default: tensorflow)")
      ->check(CLI::IsMember({"tensorflow", "exact"}));
  app.add_option("--policy", policy,
                 "our stacks: growth policy (default: preallocate, grow for bfc-grow); with grow the expandable"
                 " arena gives freed pages back (the default stack for unplanned memory)")
      ->check(CLI::IsMember({"grow", "preallocate"}));
  app.add_option("--reuse-bytes", stack_options.reuse_bytes,
                 "our expandable stacks: freed bytes the arena keeps whole for requests of their exact size"
                 " (default: MemoryConfig's; 0 = off)");
  app.add_option("--arena-shards", stack_options.arena_shards,
                 "our expandable stacks: arenas the budget is split across, a thread allocating from one of them"
                 " (MemoryConfig::arena_shards; default 1)")
      ->check(CLI::Range(std::size_t{1}, tp::memory::MemoryConfig::kMaxArenaShards));
  app.add_option("--release-decay-events", stack_options.release_decay_events,
                 "our expandable stacks: allocator events a freed granule beyond the release threshold stays"
                 " committed unused (default: ArenaOptions'; 0 = released at once, the policy before decay)");
  try {
    app.parse(argc, argv);
    if (!bfc_split.empty()) {
      stack_options.bfc_split = bfc_split == "exact" ? tp::memory::BfcSplit::exact : tp::memory::BfcSplit::tensorflow;
    }
    if (!flush_before_growth.empty()) {
      std::cerr << "tp_replay_worker: --flush-before-growth was removed: stacks over the expandable arena build no"
                   " thread cache, so nothing is flushed before growth; drop the flag (--compact-before-growth"
                   " still applies)\n";
      return 2;
    }
    if (stack_options.compaction_slack && !stack_options.compact_before_growth) {
      std::cerr << "tp_replay_worker: --compaction-slack needs --compact-before-growth (without it the arena never"
                   " compacts before growing)\n";
      return 2;
    }
    if (stack_options.compact_before_growth && (allocator_name != "expandable" || stack_options.tracking)) {
      std::cerr << "tp_replay_worker: --compact-before-growth needs --allocator expandable without --tracking (the"
                   " tracking adaptor keys its records by pointer)\n";
      return 2;
    }
    if (!policy.empty()) {
      stack_options.policy = policy == "grow" ? tp::memory::GrowthPolicy::grow : tp::memory::GrowthPolicy::preallocate;
    }
    return run(trace_path, allocator_name, mode, rounds, threads, capacity_factor, stack_options);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const std::exception& error) {
    std::cerr << "tp_replay_worker: " << error.what() << '\n';
    return 1;
  }
}

// SPDX-License-Identifier: Apache-2.0
// tp_replay_worker: replays one allocation trace with one allocator and prints one JSON line.
//
// Built three times from this file: linked as is (glibc malloc), with jemalloc and with mimalloc (both
// replace malloc/free for the whole process), so `--allocator malloc` measures whichever malloc the binary
// got; the report names the library that actually provides `malloc`. `--allocator bfc|bfc-grow|expandable`
// replays through one of our memory stacks over a simulated device (make_sim_device_memory_stack).
//
// Modes:
//   latency    --rounds N times the trace in event order, single-threaded; each round is timed as a whole
//              (no per-operation timer, no memory touched): ns per allocate+free pair = round time /
//              allocations. Round 1 is "cold" (the allocator grows); the rest are "warm".
//   footprint  one round that writes one byte per 4 KiB of every allocation; reports the peak RSS above the
//              RSS just before the replay and, for our stacks, peak_bytes_reserved from stats().
//   min-capacity  (our stacks only) the smallest device capacity on which the trace replays without an
//              out-of-memory error (find_min_capacity of the replay library).

// GCC 12 at -O2 reports a "potential null pointer dereference" inside CLI11's string splitting (inlined
// std::string moves in CLI::detail::split): a false positive in library code, silenced for that header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <CLI/CLI.hpp>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "our_stacks.hpp"
#include "process_memory.hpp"
#include "replay_plan.hpp"
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
  void* allocate(std::size_t bytes) { return resource.allocate(bytes); }
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

template <typename Allocator>
void measure_latency(const ReplayPlan& plan, Allocator& allocator, int rounds, nlohmann::json& report) {
  std::vector<void*> slots(plan.slot_count, nullptr);
  std::vector<double> per_round;
  for (int round = 0; round < rounds; ++round) {
    per_round.push_back(ns_per_pair(tp::bench::replay_round<false>(plan, slots, allocator), plan));
  }
  report["round_ns_per_pair"] = per_round;
  report["cold_ns_per_pair"] = per_round.front();
  report["warm_ns_per_pair"] =
      per_round.size() > 1 ? median(std::vector<double>(per_round.begin() + 1, per_round.end())) : per_round.front();
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

int run(const std::string& trace_path, const std::string& allocator_name, const std::string& mode, int rounds,
        double capacity_factor, const tp::bench::OurStackOptions& stack_options) {
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
      measure_latency(plan, allocator, rounds, report);
    } else if (mode == "footprint") {
      measure_footprint(plan, allocator, report);
    } else {
      std::cerr << "tp_replay_worker: mode " << mode << " needs one of our allocators\n";
      return 2;
    }
  } else if (mode == "min-capacity") {
    report["min_capacity_bytes"] = tp::bench::our_min_capacity(trace, allocator_name, stack_options);
  } else {
    const std::size_t capacity = tp::bench::device_capacity(plan.peak_live_bytes, capacity_factor);
    auto stack = tp::bench::make_our_stack(allocator_name, capacity, stack_options);
    StackAllocator allocator{*stack};
    report["capacity_bytes"] = capacity;
    report["limit_bytes"] = stack->limit_bytes();
    if (stack_options.split_threshold) report["split_threshold"] = *stack_options.split_threshold;
    report["policy"] = stack->config().policy == tp::memory::GrowthPolicy::grow ? "grow" : "preallocate";
    if (mode == "latency") {
      measure_latency(plan, allocator, rounds, report);
    } else {
      measure_footprint(plan, allocator, report);
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
  double capacity_factor = tp::bench::kDefaultCapacityFactor;
  tp::bench::OurStackOptions stack_options;
  app.add_option("--trace", trace_path, "RMM-format CSV trace")->required()->check(CLI::ExistingFile);
  app.add_option("--allocator", allocator_name, "malloc (this binary's malloc) or one of our stacks")
      ->check(CLI::IsMember({"malloc", "bfc", "bfc-grow", "expandable"}));
  app.add_option("--mode", mode, "what to measure")->check(CLI::IsMember({"latency", "footprint", "min-capacity"}));
  app.add_option("--rounds", rounds, "latency rounds (the first is cold)")->check(CLI::Range(1, 1000));
  app.add_option("--capacity-factor", capacity_factor, "simulated device capacity / trace peak live bytes")
      ->check(CLI::Range(1.0, 1024.0));
  app.add_option("--split-threshold", stack_options.split_threshold,
                 "BFC split threshold in bytes (tuning experiments; default: MemoryConfig's)");
  try {
    app.parse(argc, argv);
    return run(trace_path, allocator_name, mode, rounds, capacity_factor, stack_options);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const std::exception& error) {
    std::cerr << "tp_replay_worker: " << error.what() << '\n';
    return 1;
  }
}

// SPDX-License-Identifier: Apache-2.0
// tensorpool replay --trace FILE --allocator bfc|bfc-grow|expandable|system|all [--capacity BYTES] [--json]
//                   [--find-min-capacity] [--repeat N] [--bfc-split exact|tensorflow] [--share-granules]
//                   [--compact] [--compact-before-growth] [--device sim|cuda:N]
// Replays a trace on a simulated device, or with --device cuda:N on a GPU's own memory sources (then also
// --allocator cuda_malloc_async|managed, and each row carries the driver's view: cudaMemGetInfo before and after
// the replay next to the stack's reserved bytes; without a GPU a tp::DeviceError names the reason). One fresh
// stack per run; prints one row per allocator plus the
// offline planner's heap next to the lower bound. --bfc-split sets the split policy of the bfc and bfc-grow
// rows (TensorFlow's rule by default); --share-granules lets the expandable row's arena share physical granules
// between virtual ones (MemoryConfig::share_granules, off by default); --compact makes the expandable row compact
// its arena when an allocation is refused and retry it once (ExpandableArena::compact, the replay's table of
// live pointers the owner that follows each move), every allocation's bytes checked at its free;
// --compact-before-growth does that too and lets the arena compact before it grows (reclaim before growing,
// MemoryConfig::compact_before_growth, the same table its registered relocator). Bad input throws tp::InvalidArgument / tp::DataError,
// which main() turns into exit code 2 and a one-line message. Out of memory under pressure (live allocations
// fill a small --capacity) is the measurement, counted in the OOMs column; an allocation that no freeing could
// serve (a fresh, empty device refuses it too: it exceeds the capacity, or the host cannot back it) means the
// trace cannot be replayed: tp::OutOfMemoryError naming the trace line, exit code 3.
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "option_checks.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/cuda_memory.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/offline_planner.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/replay.hpp"
#include "tensorpool/memory/trace.hpp"

namespace tp::cli {
namespace {

constexpr std::size_t kMaxRepeat = 1000;

struct ReplayArguments {
  std::string trace;
  std::string allocator = "all";
  std::string capacity;
  std::string repeat = "1";
  std::string bfc_split;  // exact | tensorflow; empty: tensorflow
  bool json = false;
  bool find_min_capacity = false;
  bool share_granules = false;
  bool compact = false;
  bool compact_before_growth = false;
  std::string device = "sim";  // sim | cuda:N
};

// The stack one replay runs on: the allocator's replay configuration with the chosen BFC split policy and,
// for the expandable arena, granule sharing.
struct ReplayStack {
  memory::ReplayAllocator allocator;
  memory::BfcSplit split;
  bool share_granules = false;
  bool compact = false;                // the expandable row compacts on a refusal
  bool compact_before_growth = false;  // ...and before its arena grows
  std::optional<int> cuda_ordinal;     // the GPU whose sources the stack is built on; none: a simulated device

  bool is_bfc() const { return memory::replay_memory_config(allocator).allocator == memory::AllocatorKind::bfc; }
  bool is_expandable() const {
    return memory::replay_memory_config(allocator).allocator == memory::AllocatorKind::expandable;
  }
  std::unique_ptr<memory::MemoryStack> make(std::size_t capacity) const {
    memory::MemoryConfig config = memory::replay_memory_config(allocator, device_name());
    config.bfc_split = split;
    config.share_granules = share_granules && is_expandable();
    config.compact_before_growth = compact_before_growth && is_expandable();
    if (cuda_ordinal.has_value()) return device::make_cuda_device_memory_stack(config, capacity, *cuda_ordinal);
    return memory::make_sim_device_memory_stack(config, capacity);
  }
  std::string device_name() const {
    return cuda_ordinal.has_value() ? "cuda:" + std::to_string(*cuda_ordinal) : std::string("sim:0");
  }
  bool compacts() const { return (compact || compact_before_growth) && is_expandable(); }
  // The row's replay options: compaction of the stack's arena, with every allocation's bytes checked.
  memory::ReplayOptions replay_options(memory::MemoryStack& instance) const {
    memory::ReplayOptions options;
    if (compacts()) {
      options.compact = memory::compactable_arena(instance);
      options.check_contents = true;
    }
    return options;
  }
  // The row's name: the allocator's, with the split policy when it is not TensorFlow's ("bfc (exact)").
  std::string label() const {
    std::string text(memory::to_string(allocator));
    if (is_bfc() && split != memory::BfcSplit::tensorflow) text += fmt::format(" ({})", memory::to_string(split));
    if (is_expandable() && share_granules) text += " (shared granules)";
    if (compacts()) text += compact_before_growth ? " (compact before growth)" : " (compact)";
    return text;
  }
};

// On a GPU: the driver's view of the last run, so the stack's stats can be checked against it.
struct DriverView {
  std::size_t used_before = 0;     // cudaMemGetInfo total - free, the stack built, before the replay
  std::size_t used_after = 0;      // the same after the replay, the stack still alive
  std::size_t reserved_after = 0;  // the stack's stats().bytes_reserved then (the pool's ReservedMemCurrent)
  // used_after - used_before (0 when the driver reports less): what the replay left reserved, per the driver.
  std::size_t delta() const { return used_after > used_before ? used_after - used_before : 0; }
};

struct AllocatorReport {
  ReplayStack stack;
  memory::ReplayResult result;
  std::optional<memory::MinCapacityResult> min_capacity;
  std::optional<DriverView> driver;
};

// "sim" or "cuda:N"; the GPU's ordinal for the latter.
std::optional<int> parse_device(const std::string& text) {
  if (text == "sim") return std::nullopt;
  int ordinal = -1;
  const std::string_view digits = std::string_view(text).substr(text.starts_with("cuda:") ? 5 : text.size());
  const auto [ptr, error] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
  if (!text.starts_with("cuda:") || digits.empty() || error != std::errc{} || ptr != digits.data() + digits.size() ||
      ordinal < 0) {
    TP_THROW(InvalidArgument, "replay", "--device '", text, "' is not sim or cuda:N; pass e.g. cuda:0");
  }
  return ordinal;
}

std::vector<memory::ReplayAllocator> parse_allocators(const std::string& text, bool cuda) {
  if (text == "all") return cuda ? memory::cuda_replay_allocators() : memory::all_replay_allocators();
  for (const memory::ReplayAllocator allocator : memory::cuda_replay_allocators()) {
    if (text != memory::to_string(allocator)) continue;
    if (!cuda && memory::is_cuda_only(memory::replay_memory_config(allocator).allocator)) {
      TP_THROW(InvalidArgument, "replay", "--allocator ", text,
               " is a CUDA device's source; pass --device cuda:N, or one of bfc, bfc-grow, expandable, system");
    }
    return {allocator};
  }
  TP_THROW(InvalidArgument, "replay", "--allocator '", text,
           "' is unknown; use bfc, bfc-grow, expandable, system, cuda_malloc_async, managed or all");
}

// Refuses `flag` when no allocator among `allocators` has the rows it applies to (`applies`): it would change
// nothing the table shows.
void require_rows(const std::vector<memory::ReplayAllocator>& allocators, bool (ReplayStack::*applies)() const,
                  const std::string& flag, std::string_view rows, const std::string& allocator) {
  const bool any = std::any_of(allocators.begin(), allocators.end(), [applies](memory::ReplayAllocator each) {
    return (ReplayStack{each, memory::BfcSplit::tensorflow, false, false, false, std::nullopt}.*applies)();
  });
  if (!any) {
    TP_THROW(InvalidArgument, "replay", flag, " applies to --allocator ", rows, " or all, not ", allocator,
             "; pass one of those, or leave ", flag, " out");
  }
}

// The split policy of the bfc rows.
memory::BfcSplit parse_bfc_split(const ReplayArguments& arguments,
                                 const std::vector<memory::ReplayAllocator>& allocators) {
  if (arguments.bfc_split.empty()) return memory::BfcSplit::tensorflow;
  require_rows(allocators, &ReplayStack::is_bfc, "--bfc-split " + arguments.bfc_split, "bfc, bfc-grow",
               arguments.allocator);
  return arguments.bfc_split == "exact" ? memory::BfcSplit::exact : memory::BfcSplit::tensorflow;
}

std::size_t parse_repeat(const std::string& text) {
  std::size_t repeat = 0;
  const auto [ptr, error] = std::from_chars(text.data(), text.data() + text.size(), repeat);
  if (error != std::errc{} || ptr != text.data() + text.size() || repeat == 0 || repeat > kMaxRepeat) {
    TP_THROW(InvalidArgument, "replay", "--repeat '", text, "' is not a count; write an integer from 1 to ",
             kMaxRepeat);
  }
  return repeat;
}

// Enough for every allocator on a well-behaved trace: twice the peak of live bytes, in whole GiB.
std::size_t default_capacity(const memory::Trace& trace) {
  const std::size_t peak = trace.peak_live_bytes();  // <= kMaxAllocationBytes, so doubling cannot overflow
  return std::min(memory::kMaxAllocationBytes, std::max(kGiB, memory::round_up(2 * peak, kGiB)));
}

std::size_t resolve_capacity(const ReplayArguments& arguments, const memory::Trace& trace) {
  if (arguments.capacity.empty()) return default_capacity(trace);
  const std::size_t capacity = parse_bytes(arguments.capacity, "--capacity");
  // One 2 MiB granule is the least every allocator (the expandable arena commits whole granules) can use.
  if (capacity < 2 * kMiB || capacity > memory::kMaxAllocationBytes) {
    TP_THROW(InvalidArgument, "replay", "--capacity ", arguments.capacity, " is outside [2MiB, ",
             format_bytes(memory::kMaxAllocationBytes), "]; pass the simulated device's size, e.g. 1GiB");
  }
  return capacity;
}

memory::Trace load_trace(const std::string& path) {
  if (path.empty()) {
    TP_THROW(InvalidArgument, "replay",
             "--trace FILE is required; pass a trace CSV such as bench/traces/data/training.csv");
  }
  if (std::filesystem::is_directory(path)) {
    TP_THROW(InvalidArgument, "replay", "--trace '", path, "' is a directory; pass one trace CSV file");
  }
  return memory::read_trace_file(path);
}

// Throws when the largest allocation the replay refused is refused by a fresh, empty stack too: no freeing
// could serve it, so the trace cannot be replayed on this device (tp::OutOfMemoryError naming the trace line
// and the fix). Refusals that an empty device serves came from memory pressure and stay results.
void check_replayable(const memory::Trace& trace, const ReplayStack& stack, std::size_t capacity, bool default_capacity,
                      const memory::ReplayResult& result) {
  if (result.largest_oom_event == memory::kNoEvent) return;
  const std::size_t size = result.largest_oom_bytes;
  const std::string line = trace.source() + ":" + std::to_string(trace.line(result.largest_oom_event));
  auto name = [&](OutOfMemoryReport& report) {
    report.request_tag.name = "trace line " + line;
    report.request_tag.op = fmt::format("replay --allocator {}", memory::to_string(stack.allocator));
    if (stack.is_bfc()) report.request_tag.op += fmt::format(" --bfc-split {}", memory::to_string(stack.split));
    if (stack.is_expandable() && stack.share_granules) report.request_tag.op += " --share-granules";
    if (stack.compacts())
      report.request_tag.op += stack.compact_before_growth ? " --compact-before-growth" : " --compact";
    const std::size_t needed = std::max(size, report.rounded_bytes);  // the allocator's rounding included
    if (needed > capacity) {
      report.suggestion = fmt::format("pass --capacity {} or more (or leave --capacity out: twice the peak live)",
                                      format_bytes(needed));
    } else if (default_capacity) {  // twice the peak: more than any allocator's rounding of one allocation
      report.suggestion =
          "the host cannot back it (a simulated device maps its memory from the host); check the "
          "trace's Size column, or replay on a host with more memory";
    } else {
      report.suggestion =
          "an empty device of this --capacity refuses it too (the allocator's rounding, e.g. the "
          "expandable arena's 2 MiB granules, or a host that cannot back it): raise --capacity, "
          "or leave it out";
    }
  };
  try {
    const std::unique_ptr<memory::MemoryStack> empty = stack.make(capacity);
    empty->deallocate(empty->allocate(size), size);
  } catch (OutOfMemoryError& error) {
    error.amend(name);
    throw;
  } catch (const std::bad_alloc&) {
    OutOfMemoryReport report = OutOfMemoryReport::for_request(stack.label(), size, size, {}, capacity, 0, 0);
    name(report);
    throw OutOfMemoryError(std::move(report));
  }
}

std::string ratio(double value) { return fmt::format("{:.3f}", value); }

void print_table(const ReplayArguments& arguments, const memory::Trace& trace, std::size_t capacity, std::size_t repeat,
                 const std::vector<AllocatorReport>& reports, const memory::OfflinePlan& plan) {
  std::vector<std::string> header{"allocator", "ops",           "median ns",     "p99 ns",
                                  "peak live", "peak reserved", "reserved/live", "OOMs"};
  if (arguments.find_min_capacity) header.emplace_back("min capacity");
  std::vector<std::vector<std::string>> rows;
  for (const AllocatorReport& report : reports) {
    const memory::ReplayResult& result = report.result;
    std::vector<std::string> row{report.stack.label(),
                                 std::to_string(result.ops),
                                 std::to_string(result.median_pair_ns),
                                 std::to_string(result.p99_pair_ns),
                                 format_bytes(result.peak_live_bytes),
                                 format_bytes(result.peak_reserved_bytes),
                                 ratio(result.reserved_to_live),
                                 std::to_string(result.oom_count)};
    if (report.min_capacity) row.push_back(format_bytes(report.min_capacity->capacity_bytes));
    rows.push_back(std::move(row));
  }
  const double plan_ratio = plan.lower_bound_bytes == 0
                                ? 0.0
                                : static_cast<double>(plan.heap_bytes) / static_cast<double>(plan.lower_bound_bytes);
  std::vector<std::string> plan_row{
      "offline plan",    "-", "-", "-", format_bytes(plan.lower_bound_bytes), format_bytes(plan.heap_bytes),
      ratio(plan_ratio), "-"};
  if (arguments.find_min_capacity) plan_row.push_back(format_bytes(plan.heap_bytes));
  rows.push_back(std::move(plan_row));

  std::vector<std::size_t> widths(header.size());
  for (std::size_t column = 0; column < header.size(); ++column) {
    widths[column] = header[column].size();
    for (const auto& row : rows) widths[column] = std::max(widths[column], row[column].size());
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t column = 0; column < row.size(); ++column) {
      if (column == 0) {
        line += fmt::format("{:<{}}", row[column], widths[column]);
      } else {
        line += fmt::format("  {:>{}}", row[column], widths[column]);
      }
    }
    std::cout << line << '\n';
  };
  const std::size_t threads = trace.threads().size();
  std::cout << fmt::format("trace: {} ({} events, {} thread{}, {} allocations, peak live {})\n", arguments.trace,
                           trace.size(), threads, threads == 1 ? "" : "s", trace.allocation_count(),
                           format_bytes(trace.peak_live_bytes()));
  const std::string device = reports.empty() || !reports.front().stack.cuda_ordinal.has_value()
                                 ? "simulated"
                                 : reports.front().stack.device_name();
  std::cout << fmt::format("device: {}, capacity {}; {} run{} per allocator; ns per allocate+free pair\n\n", device,
                           format_bytes(capacity), repeat, repeat == 1 ? "" : "s");
  print_row(header);
  for (const auto& row : rows) print_row(row);
  std::cout << fmt::format(
      "\noffline plan ({}): heap of a planner that sees the whole trace; peak live is the "
      "lower bound\n",
      plan.strategy);
  const bool has_bfc = std::any_of(reports.begin(), reports.end(), [](const AllocatorReport& report) {
    return report.stack.allocator == memory::ReplayAllocator::bfc;
  });
  for (const AllocatorReport& report : reports) {
    if (!report.stack.compacts()) continue;
    const memory::ReplayCompaction& compaction = report.result.compaction;
    std::cout << fmt::format(
        "{}: {} refusal{} compacted, {} then served; {} of {} growing request{} compacted first ({} by "
        "evacuation), {} then served without growing; {} block{} moved ({} copied, {} remapped), {} granule{} "
        "({}) freed\n",
        report.stack.label(), compaction.compactions, compaction.compactions == 1 ? "" : "s", compaction.retries_served,
        compaction.before_growth, compaction.growth_requests, compaction.growth_requests == 1 ? "" : "s",
        compaction.evacuations, compaction.growth_avoided, compaction.blocks_moved,
        compaction.blocks_moved == 1 ? "" : "s", format_bytes(compaction.bytes_copied),
        format_bytes(compaction.bytes_remapped), compaction.granules_freed, compaction.granules_freed == 1 ? "" : "s",
        format_bytes(compaction.granules_freed * compaction.granularity));
  }
  for (const AllocatorReport& report : reports) {
    if (!report.driver) continue;
    std::cout << fmt::format(
        "{}: after the replay the stack reserves {}; the driver's used memory grew by {} "
        "({} -> {}, cudaMemGetInfo)\n",
        report.stack.label(), format_bytes(report.driver->reserved_after), format_bytes(report.driver->delta()),
        format_bytes(report.driver->used_before), format_bytes(report.driver->used_after));
  }
  if (has_bfc) {
    std::cout << "bfc preallocates the whole capacity at first use (TensorFlow's default); its real footprint is "
                 "its min capacity (--find-min-capacity)\n";
  }
}

void print_json(const ReplayArguments& arguments, const memory::Trace& trace, std::size_t capacity, std::size_t repeat,
                const std::vector<AllocatorReport>& reports, const memory::OfflinePlan& plan) {
  nlohmann::ordered_json output;
  output["trace"] = arguments.trace;
  output["events"] = trace.size();
  output["threads"] = trace.threads().size();
  output["allocations"] = trace.allocation_count();
  output["peak_live_bytes"] = trace.peak_live_bytes();
  output["capacity_bytes"] = capacity;
  output["device"] = arguments.device;
  output["repeat"] = repeat;
  output["results"] = nlohmann::ordered_json::array();
  for (const AllocatorReport& report : reports) {
    const memory::ReplayResult& result = report.result;
    nlohmann::ordered_json row;
    row["allocator"] = memory::to_string(report.stack.allocator);
    if (report.stack.is_bfc()) row["bfc_split"] = memory::to_string(report.stack.split);
    if (report.stack.is_expandable()) row["share_granules"] = report.stack.share_granules;
    if (report.stack.is_expandable()) row["compact"] = report.stack.compacts();
    if (report.stack.is_expandable())
      row["compact_before_growth"] = report.stack.compacts() && report.stack.compact_before_growth;
    row["ops"] = result.ops;
    row["median_ns"] = result.median_pair_ns;
    row["p99_ns"] = result.p99_pair_ns;
    row["peak_live_bytes"] = result.peak_live_bytes;
    row["peak_reserved_bytes"] = result.peak_reserved_bytes;
    row["reserved_to_live"] = result.reserved_to_live;
    row["oom_count"] = result.oom_count;
    row["skipped_frees"] = result.skipped_frees;
    if (report.stack.compacts()) {
      row["compaction"] = {
          {"compactions", result.compaction.compactions},         {"retries_served", result.compaction.retries_served},
          {"growth_requests", result.compaction.growth_requests}, {"before_growth", result.compaction.before_growth},
          {"evacuations", result.compaction.evacuations},         {"growth_avoided", result.compaction.growth_avoided},
          {"blocks_moved", result.compaction.blocks_moved},       {"bytes_copied", result.compaction.bytes_copied},
          {"bytes_remapped", result.compaction.bytes_remapped},   {"granules_freed", result.compaction.granules_freed},
          {"granule_bytes", result.compaction.granularity},
      };
    }
    if (report.driver) {
      row["driver"] = {{"used_before_bytes", report.driver->used_before},
                       {"used_after_bytes", report.driver->used_after},
                       {"used_delta_bytes", report.driver->delta()},
                       {"stack_reserved_after_bytes", report.driver->reserved_after}};
    }
    if (report.min_capacity) {
      row["min_capacity_bytes"] = report.min_capacity->capacity_bytes;
      row["min_capacity_failing_bytes"] = report.min_capacity->failing_bytes;
    }
    output["results"].push_back(std::move(row));
  }
  output["offline_plan"] = {
      {"strategy", plan.strategy},
      {"heap_bytes", plan.heap_bytes},
      {"lower_bound_bytes", plan.lower_bound_bytes},
  };
  std::cout << output.dump(2) << '\n';
}

std::size_t driver_used(int ordinal) {
  const device::CudaMemoryInfo info = device::cuda_memory_info(ordinal);
  return info.total_bytes - info.free_bytes;
}

void run_replay(const ReplayArguments& arguments) {
  const std::optional<int> cuda_ordinal = parse_device(arguments.device);
  // Without a GPU this is the clear refusal (tp::DeviceError naming the reason), before any work.
  if (cuda_ordinal.has_value()) static_cast<void>(device::cuda_memory_info(*cuda_ordinal));
  const std::vector<memory::ReplayAllocator> allocators =
      parse_allocators(arguments.allocator, cuda_ordinal.has_value());
  const memory::BfcSplit split = parse_bfc_split(arguments, allocators);
  if (arguments.share_granules) {
    require_rows(allocators, &ReplayStack::is_expandable, "--share-granules", "expandable", arguments.allocator);
  }
  for (const auto& [flag, given] : {std::pair{"--compact", arguments.compact},
                                    std::pair{"--compact-before-growth", arguments.compact_before_growth}}) {
    if (!given) continue;
    require_rows(allocators, &ReplayStack::is_expandable, flag, "expandable", arguments.allocator);
    if (arguments.share_granules) {
      TP_THROW(InvalidArgument, "replay", flag, " and --share-granules: compaction moves blocks only in an ",
               "arena whose physical granules are not shared; leave one of them out");
    }
  }
  const std::size_t repeat = parse_repeat(arguments.repeat);
  if (!arguments.capacity.empty()) (void)parse_bytes(arguments.capacity, "--capacity");  // fail before reading
  const memory::Trace trace = load_trace(arguments.trace);
  const std::size_t capacity = resolve_capacity(arguments, trace);

  std::vector<AllocatorReport> reports;
  for (const memory::ReplayAllocator allocator : allocators) {
    const ReplayStack stack{
        allocator, split, arguments.share_granules, arguments.compact, arguments.compact_before_growth, cuda_ordinal};
    std::vector<memory::ReplayResult> runs;
    std::optional<DriverView> driver;
    for (std::size_t run = 0; run < repeat; ++run) {
      const std::unique_ptr<memory::MemoryStack> instance = stack.make(capacity);
      DriverView view;
      if (cuda_ordinal.has_value()) view.used_before = driver_used(*cuda_ordinal);
      runs.push_back(memory::replay(trace, *instance, stack.replay_options(*instance)));
      if (cuda_ordinal.has_value()) {
        view.used_after = driver_used(*cuda_ordinal);
        view.reserved_after = instance->stats().bytes_reserved;
        driver = view;
      }
    }
    AllocatorReport report{stack, memory::merge_replays(runs), std::nullopt, driver};
    check_replayable(trace, stack, capacity, arguments.capacity.empty(), report.result);
    if (arguments.find_min_capacity) {
      memory::MinCapacityOptions search;
      search.compact = stack.compacts();
      report.min_capacity = memory::find_min_capacity(
          trace, [&stack](std::size_t bytes) -> std::unique_ptr<memory::MemoryResource> { return stack.make(bytes); },
          search);
    }
    reports.push_back(std::move(report));
  }
  const memory::OfflinePlan plan = memory::plan_offline(trace);
  if (arguments.json) {
    print_json(arguments, trace, capacity, repeat, reports, plan);
  } else {
    print_table(arguments, trace, capacity, repeat, reports, plan);
  }
}

}  // namespace

void add_replay_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "replay",
      "Replay an allocation trace on a simulated device with each allocator and compare latency and footprint");
  auto arguments = std::make_shared<ReplayArguments>();
  command->add_option("--trace", arguments->trace, "trace CSV (Thread,Time,Action,Pointer,Size,Stream)");
  std::vector<std::string> allocators;
  for (const memory::ReplayAllocator allocator : memory::cuda_replay_allocators()) {
    allocators.emplace_back(memory::to_string(allocator));
  }
  allocators.emplace_back("all");
  command
      ->add_option("--allocator", arguments->allocator,
                   "bfc | bfc-grow | expandable | system | all (default: all); on --device cuda:N also "
                   "cuda_malloc_async | managed")
      ->check(one_of(allocators));
  command->add_option("--device", arguments->device,
                      "sim (default: a simulated device) | cuda:N (the GPU's own memory sources; rows also show "
                      "cudaMemGetInfo before and after)");
  command->add_option("--capacity", arguments->capacity,
                      "simulated device capacity, e.g. 2GiB (default: 2 x peak live, rounded up to whole GiB)");
  command->add_flag("--json", arguments->json, "print JSON (snake_case keys, bytes as integers)");
  command->add_flag("--find-min-capacity", arguments->find_min_capacity,
                    "binary-search the smallest capacity each allocator replays without OOM");
  command->add_option("--repeat", arguments->repeat, "replays per allocator; latencies are pooled (default: 1)");
  command
      ->add_option("--bfc-split", arguments->bfc_split,
                   "the bfc rows' split policy: tensorflow (TensorFlow's rule) | exact (no chunk holds more than the "
                   "request rounded to 256 bytes); default tensorflow")
      ->check(one_of({"exact", "tensorflow"}));
  command->add_flag("--share-granules", arguments->share_granules,
                    "the expandable row's arena shares physical granules between virtual ones (less memory when small "
                    "blocks scatter over many granules, slower remaps); default off");
  command->add_flag("--compact", arguments->compact,
                    "the expandable row compacts its arena when an allocation is refused (moves live blocks down, "
                    "remapping whole granules) and retries it once; every allocation's bytes are checked");
  command->add_flag("--compact-before-growth", arguments->compact_before_growth,
                    "as --compact, and the expandable row's arena compacts before it grows when growing would leave "
                    "more than 2% of the in-use bytes (plus a granule) free inside its reservation");
  command->callback([arguments] { run_replay(*arguments); });
}

}  // namespace tp::cli

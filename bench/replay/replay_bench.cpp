// SPDX-License-Identifier: Apache-2.0
// tp_replay_bench: the allocator benchmark of docs/benchmarks.md (issue #2), every allocator side by side
// in one run.
//
// For each trace (random, training, varying_shape) and each of --runs runs, every allocator replays the
// trace in a fresh worker process (tp_replay_worker*, built next to this binary), in an order rotated by
// one per run so that no allocator always runs first or last. Then a footprint pass (--footprint-runs, pages
// touched) and, for our allocators, the minimum capacity. Prints machine, load, a markdown table of medians
// and the PASS/FAIL targets; --json writes every worker report. Exit status: 0, or 1 with --check when a
// target fails or a worker failed.

// GCC 12 at -O2 reports a "potential null pointer dereference" inside CLI11's string splitting (inlined
// std::string moves in CLI::detail::split): a false positive in library code, silenced for that header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <CLI/CLI.hpp>
#pragma GCC diagnostic pop

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_report.hpp"
#include "tensorpool/core/units.hpp"
#include "worker_process.hpp"

namespace {

using tp::bench::Cell;
using tp::bench::Contender;
using tp::bench::Results;

struct Options {
  std::string traces_dir;
  std::vector<std::string> traces{"random", "training", "varying_shape"};
  std::vector<std::string> allocators;  // empty: all
  int runs = 5;
  int rounds = 10;
  int footprint_runs = 3;
  double capacity_factor = 4.0;
  std::string json_path;
  bool check = false;
  bool callgrind = false;
};

std::string first_line_of(const std::string& path, const std::string& key) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    if (key.empty() || line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      return key.empty() || colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::string load_average() { return first_line_of("/proc/loadavg", ""); }

// Runs one worker and files its report (or its error) in the cell.
void measure(const Options& options, const std::string& trace, const Contender& contender, const std::string& mode,
             Results& results) {
  const std::string binary = tp::bench::executable_directory() + "/" + contender.binary;
  const std::string trace_path = options.traces_dir + "/" + trace + ".csv";
  std::vector<std::string> arguments{"--trace",
                                     trace_path,
                                     "--allocator",
                                     contender.worker_allocator,
                                     "--mode",
                                     mode,
                                     "--rounds",
                                     std::to_string(options.rounds),
                                     "--capacity-factor",
                                     std::to_string(options.capacity_factor)};
  Cell& cell = results.cells[trace][contender.label];
  tp::bench::WorkerResult result = tp::bench::run_worker(binary, arguments);
  if (!result.json) {
    cell.errors.push_back(mode + ": " + result.error);
    std::cerr << "  " << contender.label << " " << mode << ": FAILED (" << result.error << ")\n";
    return;
  }
  nlohmann::json& report = *result.json;
  if (!contender.expected_malloc.empty() && report.at("malloc_impl") != contender.expected_malloc) {
    cell.errors.push_back(mode + ": malloc comes from " + report.at("malloc_library").get<std::string>() +
                          ", expected " + contender.expected_malloc);
    std::cerr << "  " << contender.label << ": wrong malloc: " << report.at("malloc_library") << '\n';
    return;
  }
  results.peak_live_bytes[trace] = report.at("peak_live_bytes").get<std::size_t>();
  results.allocations[trace] = report.at("allocations").get<std::size_t>();
  if (mode == "latency") {
    cell.latency.push_back(report);
  } else if (mode == "footprint") {
    cell.footprint.push_back(report);
  } else {
    cell.min_capacity = report;
  }
}

std::string find_in_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream directories(path != nullptr ? path : "/usr/bin:/bin");
  std::string directory;
  while (std::getline(directories, directory, ':')) {
    const std::filesystem::path candidate = std::filesystem::path(directory) / program;
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return "";
}

// Instructions executed inside replay_round() for `rounds` rounds (callgrind), or empty on failure.
std::optional<double> callgrind_instructions(const Options& options, const std::string& trace,
                                             const Contender& contender, int rounds, Cell& cell) {
  const std::string valgrind = find_in_path("valgrind");
  if (valgrind.empty()) {
    cell.errors.push_back("callgrind: valgrind not found on PATH");
    return std::nullopt;
  }
  const std::string out_file =
      (std::filesystem::temp_directory_path() / ("tp_replay_bench." + std::to_string(getpid()) + ".callgrind"))
          .string();
  const std::vector<std::string> arguments{"-q",
                                           "--tool=callgrind",
                                           "--callgrind-out-file=" + out_file,
                                           "--collect-atstart=no",
                                           "--toggle-collect=*replay_round*",
                                           tp::bench::executable_directory() + "/" + contender.binary,
                                           "--trace",
                                           options.traces_dir + "/" + trace + ".csv",
                                           "--allocator",
                                           contender.worker_allocator,
                                           "--mode",
                                           "latency",
                                           "--rounds",
                                           std::to_string(rounds),
                                           "--capacity-factor",
                                           std::to_string(options.capacity_factor)};
  const tp::bench::WorkerResult result = tp::bench::run_worker(valgrind, arguments);
  std::optional<double> instructions;
  std::ifstream totals(out_file);
  std::string line;
  while (std::getline(totals, line)) {
    if (line.rfind("totals:", 0) == 0 || line.rfind("summary:", 0) == 0) {
      instructions = std::stod(line.substr(line.find(':') + 1));
    }
  }
  std::filesystem::remove(out_file);
  if (!result.json || !instructions) {
    cell.errors.push_back("callgrind: " + (result.json ? std::string("no totals in the output") : result.error));
    return std::nullopt;
  }
  return instructions;
}

// Round 1 alone, then rounds 1-3: cold = I1 / pairs, warm = (I3 - I1) / (2 pairs). Deterministic.
void count_instructions(const Options& options, const std::string& trace, Results& results) {
  for (const Contender& contender : results.contenders) {
    std::cerr << trace << ": callgrind " << contender.label << '\n';
    Cell& cell = results.cells[trace][contender.label];
    const std::optional<double> one = callgrind_instructions(options, trace, contender, 1, cell);
    const std::optional<double> three = callgrind_instructions(options, trace, contender, 3, cell);
    const auto pairs = static_cast<double>(results.allocations[trace]);
    if (!one || !three || pairs <= 0.0) continue;
    cell.cold_instructions = *one / pairs;
    cell.warm_instructions = (*three - *one) / (2.0 * pairs);
  }
}

// `runs` passes over the contenders, each pass starting one further along.
void rotated_passes(const Options& options, const std::string& trace, const std::string& mode, int runs,
                    Results& results) {
  const std::size_t count = results.contenders.size();
  for (int run = 0; run < runs; ++run) {
    std::cerr << trace << ": " << mode << " run " << run + 1 << "/" << runs << '\n';
    for (std::size_t index = 0; index < count; ++index) {
      measure(options, trace, results.contenders[(index + static_cast<std::size_t>(run)) % count], mode, results);
    }
  }
}

int run(const Options& options) {
  Results results;
  results.traces = options.traces;
  for (const Contender& contender : tp::bench::all_contenders()) {
    if (options.allocators.empty() ||
        std::find(options.allocators.begin(), options.allocators.end(), contender.label) != options.allocators.end()) {
      results.contenders.push_back(contender);
    }
  }
  const std::string load_before = load_average();
  for (const std::string& trace : options.traces) {
    if (!std::filesystem::exists(options.traces_dir + "/" + trace + ".csv")) {
      std::cerr << "tp_replay_bench: no trace " << options.traces_dir << "/" << trace << ".csv\n";
      return 2;
    }
    rotated_passes(options, trace, "latency", options.runs, results);
    rotated_passes(options, trace, "footprint", options.footprint_runs, results);
    if (options.callgrind) count_instructions(options, trace, results);
    for (const Contender& contender : results.contenders) {
      if (contender.ours) {
        std::cerr << trace << ": min capacity " << contender.label << '\n';
        measure(options, trace, contender, "min-capacity", results);
      }
    }
  }
  const std::string load_after = load_average();

  const std::vector<tp::bench::Target> targets = tp::bench::evaluate_targets(results);
  std::cout << "## Allocator replay benchmark\n\n"
            << "CPU: " << first_line_of("/proc/cpuinfo", "model name") << ", " << std::thread::hardware_concurrency()
            << " logical CPUs. Load average before: " << load_before << "; after: " << load_after << ".\n"
            << "Runs " << options.runs << " (fresh process each, rotated order), rounds per run " << options.rounds
            << " (round 1 cold, median of the rest = warm), footprint runs " << options.footprint_runs
            << ", simulated device capacity " << options.capacity_factor << " x peak live.\n\n";
  for (const std::string& trace : results.traces) {
    if (results.peak_live_bytes.count(trace)) {
      std::cout << "- " << trace << ": " << results.allocations[trace] << " allocations, peak live "
                << tp::format_bytes(results.peak_live_bytes[trace]) << " (" << results.peak_live_bytes[trace]
                << " B)\n";
    }
  }
  std::cout << '\n';
  tp::bench::print_table(std::cout, results);
  std::cout << '\n';
  if (options.callgrind) {
    std::cout << "Instructions inside the replay loop (valgrind --tool=callgrind), per allocate+free pair:\n\n";
    tp::bench::print_instruction_table(std::cout, results);
    std::cout << '\n';
  }
  tp::bench::print_targets(std::cout, targets);

  bool any_error = false;
  for (const auto& [trace, by_label] : results.cells) {
    for (const auto& [label, cell] : by_label) {
      for (const std::string& error : cell.errors) {
        std::cout << "\nerror: " << trace << " / " << label << ": " << error;
        any_error = true;
      }
    }
  }
  std::cout << std::endl;
  if (!options.json_path.empty()) {
    nlohmann::json json = tp::bench::to_json(results, targets);
    json["load_average_before"] = load_before;
    json["load_average_after"] = load_after;
    json["runs"] = options.runs;
    json["rounds"] = options.rounds;
    json["footprint_runs"] = options.footprint_runs;
    json["capacity_factor"] = options.capacity_factor;
    std::ofstream(options.json_path) << json.dump(2) << '\n';
  }
  bool all_pass = true;
  for (const auto& target : targets) all_pass = all_pass && (!target.value || target.pass());
  return options.check && (!all_pass || any_error) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tp_replay_bench: replays allocation traces with glibc malloc, jemalloc, mimalloc and our "
      "allocators, side by side"};
  Options options;
  app.add_option("--traces", options.traces_dir, "directory of <trace>.csv")->required()->check(CLI::ExistingDirectory);
  app.add_option("--trace", options.traces, "trace names (default: random training varying_shape)");
  app.add_option("--allocator", options.allocators, "allocators (default: all)")
      ->check(CLI::IsMember({"malloc", "jemalloc", "mimalloc", "bfc", "bfc-grow", "expandable"}));
  app.add_option("--runs", options.runs, "latency runs per allocator and trace")->check(CLI::Range(1, 100));
  app.add_option("--rounds", options.rounds, "replays of the trace per run")->check(CLI::Range(1, 1000));
  app.add_option("--footprint-runs", options.footprint_runs, "footprint runs (pages touched)")
      ->check(CLI::Range(0, 100));
  app.add_option("--capacity-factor", options.capacity_factor, "simulated device capacity / peak live")
      ->check(CLI::Range(1.0, 1024.0));
  app.add_option("--json", options.json_path, "write every worker report here");
  app.add_flag("--callgrind", options.callgrind,
               "also count instructions per pair under valgrind --tool=callgrind (slow, deterministic)");
  app.add_flag("--check", options.check, "exit 1 when a target fails or a worker fails");
  try {
    app.parse(argc, argv);
    return run(options);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const std::exception& error) {
    std::cerr << "tp_replay_bench: " << error.what() << '\n';
    return 2;
  }
}

// SPDX-License-Identifier: Apache-2.0
// tensorpool trace generate --kind random|training|varying_shape|llm_serving|growing_batch|all --output PATH
//                          [--seed N]
// One kind writes one file (PATH, or PATH/KIND.csv when PATH is a directory); --kind all writes KIND.csv for
// each kind into the directory PATH, created if missing, and refuses a PATH that is a file or is named like
// one (*.csv) rather than make a directory of that name.
#include "commands.hpp"
#include "option_checks.hpp"

#include <charconv>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/trace_generators.hpp"

namespace tp::cli {
namespace {

struct GenerateArguments {
  std::string kind = "all";
  std::string output = "bench/traces/data";
  std::string seed = "1";
};

void run_generate(const GenerateArguments& arguments) {
  std::uint64_t seed = 0;
  const auto [ptr, error] = std::from_chars(arguments.seed.data(), arguments.seed.data() + arguments.seed.size(), seed);
  if (error != std::errc{} || ptr != arguments.seed.data() + arguments.seed.size()) {
    TP_THROW(InvalidArgument, "trace", "--seed '", arguments.seed, "' is not an unsigned integer; write e.g. --seed 1");
  }
  std::vector<std::string> kinds;
  if (arguments.kind == "all") {
    kinds = memory::trace_kinds();
  } else {
    kinds.push_back(arguments.kind);
  }
  const std::filesystem::path output = arguments.output;
  const bool to_directory = arguments.kind == "all" || std::filesystem::is_directory(output);
  if (arguments.kind == "all") {
    const bool is_file = std::filesystem::exists(output) && !std::filesystem::is_directory(output);
    if (is_file || output.extension() == ".csv") {
      TP_THROW(InvalidArgument, "trace", "--output '", arguments.output, "' ", is_file ? "is a file" : "names a file",
               "; --kind all writes one file per kind (KIND.csv) into a directory: pass a directory, or one ",
               "--kind to write one file");
    }
  }
  if (to_directory) {
    std::error_code ignored;
    std::filesystem::create_directories(output, ignored);
    if (!std::filesystem::is_directory(output)) {
      TP_THROW(InvalidArgument, "trace", "--output '", arguments.output,
               "' is not a directory and cannot be created; pass a writable directory for --kind all");
    }
  }
  for (const std::string& kind : kinds) {
    const memory::Trace trace = memory::generate_trace(kind, seed);  // throws for an unknown kind
    const std::filesystem::path path = to_directory ? output / (kind + ".csv") : output;
    memory::write_trace_file(path, trace);
    std::cout << fmt::format("{}: {} events, {} allocations, peak live {} -> {}\n", kind, trace.size(),
                             trace.allocation_count(), format_bytes(trace.peak_live_bytes()), path.string());
  }
}

}  // namespace

void add_trace_command(CLI::App& app) {
  CLI::App* trace = app.add_subcommand("trace", "Allocation trace utilities");
  trace->require_subcommand(1);
  std::vector<std::string> kinds = memory::trace_kinds();
  std::string listed;
  for (const std::string& kind : kinds) listed += (listed.empty() ? "" : ", ") + kind;
  CLI::App* generate = trace->add_subcommand(
      "generate", fmt::format("Write the synthetic traces ({}) used by tests and benchmarks", listed));
  auto arguments = std::make_shared<GenerateArguments>();
  kinds.emplace_back("all");
  generate->add_option("--kind", arguments->kind, fmt::format("{}, or all (default: all)", listed))
      ->check(one_of(kinds));
  generate->add_option("--output", arguments->output,
                       "file to write (a directory: KIND.csv in it), or the directory for --kind all, where each kind "
                       "goes to KIND.csv (default: bench/traces/data)");
  generate->add_option("--seed", arguments->seed, "seed of the generators (default: 1)");
  generate->callback([arguments] { run_generate(*arguments); });
}

}  // namespace tp::cli

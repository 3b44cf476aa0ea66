// SPDX-License-Identifier: Apache-2.0
#pragma once
// The results of tp_replay_bench and how they are summarised: medians per (trace, allocator), the markdown
// table and the PASS/FAIL targets of issue #2.

#include <cstddef>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tp::bench {

struct Contender {
  std::string label;             // column value: malloc, jemalloc, mimalloc, bfc, bfc-grow, expandable
  std::string binary;            // worker executable name
  std::string worker_allocator;  // --allocator of the worker
  std::string expected_malloc;   // malloc_impl the worker must report ("" for ours)
  bool ours = false;
};

std::vector<Contender> all_contenders();

// Everything measured for one (trace, contender).
struct Cell {
  std::vector<nlohmann::json> latency;    // one worker report per run
  std::vector<nlohmann::json> footprint;  // one per footprint run
  std::optional<nlohmann::json> min_capacity;
  std::optional<double> cold_instructions;  // per pair, round 1 (callgrind, --callgrind)
  std::optional<double> warm_instructions;  // per pair, (rounds 1-3 minus round 1) / 2
  std::vector<std::string> errors;
};

struct Results {
  std::vector<std::string> traces;  // in run order
  std::vector<Contender> contenders;
  std::map<std::string, std::map<std::string, Cell>> cells;  // trace -> label -> cell
  std::map<std::string, std::size_t> peak_live_bytes;        // trace -> bytes
  std::map<std::string, std::size_t> allocations;            // trace -> allocate events
};

// Summary numbers of a cell; empty when not measured.
struct Summary {
  std::optional<double> warm_ns;  // median over runs of each run's warm median
  std::optional<double> warm_min_ns;
  std::optional<double> warm_max_ns;
  std::optional<double> cold_ns;               // median over runs of round 1
  std::optional<std::size_t> footprint_bytes;  // ours: peak reserved; others: peak RSS above baseline
  std::optional<std::size_t> min_capacity_bytes;
};

Summary summarize(const Cell& cell, bool ours);

struct Target {
  std::string name;
  std::string trace;
  std::optional<double> value;  // empty: not measured (allocator or trace not selected, or its worker failed)
  double limit = 0.0;
  std::string unit;  // "x live", "x jemalloc"
  bool pass() const noexcept { return value.has_value() && *value <= limit; }
};

std::vector<Target> evaluate_targets(const Results& results);

void print_table(std::ostream& out, const Results& results);
// Instructions per allocate+free pair under callgrind; only when the cells have them.
void print_instruction_table(std::ostream& out, const Results& results);
void print_targets(std::ostream& out, const std::vector<Target>& targets);
nlohmann::json to_json(const Results& results, const std::vector<Target>& targets);

}  // namespace tp::bench

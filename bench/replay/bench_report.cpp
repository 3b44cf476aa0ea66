// SPDX-License-Identifier: Apache-2.0
#include "bench_report.hpp"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "tensorpool/core/units.hpp"

namespace tp::bench {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2.0;
}

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::optional<double> ratio(std::optional<double> numerator, std::optional<double> denominator) {
  if (!numerator || !denominator || *denominator <= 0.0) return std::nullopt;
  return *numerator / *denominator;
}

std::optional<double> as_double(std::optional<std::size_t> value) {
  if (!value) return std::nullopt;
  return static_cast<double>(*value);
}

std::string show(std::optional<double> value, int decimals, std::string_view suffix = "") {
  return value ? fixed(*value, decimals) + std::string(suffix) : std::string("-");
}

const Cell* find_cell(const Results& results, const std::string& trace, const std::string& label) {
  const auto by_trace = results.cells.find(trace);
  if (by_trace == results.cells.end()) return nullptr;
  const auto cell = by_trace->second.find(label);
  return cell == by_trace->second.end() ? nullptr : &cell->second;
}

Summary summary_of(const Results& results, const std::string& trace, const std::string& label) {
  const Cell* cell = find_cell(results, trace, label);
  if (cell == nullptr) return {};
  const bool ours = label == "bfc" || label == "bfc-grow" || label == "expandable";
  return summarize(*cell, ours);
}

std::optional<double> live_ratio(const Results& results, const std::string& trace, std::optional<std::size_t> bytes) {
  const auto live = results.peak_live_bytes.find(trace);
  if (live == results.peak_live_bytes.end()) return std::nullopt;
  return ratio(as_double(bytes), static_cast<double>(live->second));
}

}  // namespace

std::vector<Contender> all_contenders() {
  return {
      {"malloc", "tp_replay_worker", "malloc", "glibc", false},
      {"jemalloc", "tp_replay_worker_jemalloc", "malloc", "jemalloc", false},
      {"mimalloc", "tp_replay_worker_mimalloc", "malloc", "mimalloc", false},
      {"bfc", "tp_replay_worker", "bfc", "", true},
      {"bfc-grow", "tp_replay_worker", "bfc-grow", "", true},
      {"expandable", "tp_replay_worker", "expandable", "", true},
  };
}

Summary summarize(const Cell& cell, bool ours) {
  Summary summary;
  std::vector<double> warm;
  std::vector<double> cold;
  for (const nlohmann::json& run : cell.latency) {
    warm.push_back(run.at("warm_ns_per_pair").get<double>());
    cold.push_back(run.at("cold_ns_per_pair").get<double>());
  }
  if (!warm.empty()) {
    summary.warm_ns = median(warm);
    summary.warm_min_ns = *std::min_element(warm.begin(), warm.end());
    summary.warm_max_ns = *std::max_element(warm.begin(), warm.end());
    summary.cold_ns = median(cold);
  }
  std::vector<double> footprint;
  for (const nlohmann::json& run : cell.footprint) {
    footprint.push_back(run.at(ours ? "peak_reserved_bytes" : "peak_rss_bytes").get<double>());
  }
  if (!footprint.empty()) summary.footprint_bytes = static_cast<std::size_t>(median(footprint));
  if (cell.min_capacity) summary.min_capacity_bytes = cell.min_capacity->at("min_capacity_bytes").get<std::size_t>();
  return summary;
}

std::vector<Target> evaluate_targets(const Results& results) {
  std::vector<Target> targets;
  for (const std::string& trace : results.traces) {
    targets.push_back({"expandable peak reserved / peak live", trace,
                       live_ratio(results, trace, summary_of(results, trace, "expandable").footprint_bytes), 1.05,
                       "x live"});
  }
  for (const std::string& trace : results.traces) {
    targets.push_back({"bfc-grow peak reserved / peak live", trace,
                       live_ratio(results, trace, summary_of(results, trace, "bfc-grow").footprint_bytes), 1.30,
                       "x live"});
  }
  // A preallocating BFC reserves its whole budget by design; what it needs is its minimum capacity.
  for (const std::string& trace : results.traces) {
    targets.push_back({"bfc min capacity / peak live", trace,
                       live_ratio(results, trace, summary_of(results, trace, "bfc").min_capacity_bytes), 1.30,
                       "x live"});
  }
  const std::string varying = "varying_shape";
  targets.push_back({"expandable min capacity / peak live", varying,
                     live_ratio(results, varying, summary_of(results, varying, "expandable").min_capacity_bytes), 1.10,
                     "x live"});
  const std::string random = "random";
  const std::optional<double> jemalloc = summary_of(results, random, "jemalloc").warm_ns;
  for (const std::string label : {"bfc", "expandable"}) {
    targets.push_back({label + " median ns/pair vs jemalloc", random,
                       ratio(summary_of(results, random, label).warm_ns, jemalloc), 1.0, "x jemalloc"});
  }
  return targets;
}

void print_table(std::ostream& out, const Results& results) {
  out << "| trace | allocator | ns/pair warm, median [min-max] | vs jemalloc | ns/pair cold | peak footprint |"
         " footprint / live | min capacity / live |\n";
  out << "|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (const std::string& trace : results.traces) {
    const std::optional<double> jemalloc = summary_of(results, trace, "jemalloc").warm_ns;
    for (const Contender& contender : results.contenders) {
      const Cell* cell = find_cell(results, trace, contender.label);
      if (cell == nullptr) continue;
      const Summary summary = summarize(*cell, contender.ours);
      std::string latency = "-";
      if (summary.warm_ns) {
        latency = fixed(*summary.warm_ns, 1) + " [" + fixed(*summary.warm_min_ns, 1) + "-" +
                  fixed(*summary.warm_max_ns, 1) + "]";
      }
      std::string footprint = "-";
      if (summary.footprint_bytes) {
        footprint = format_bytes(*summary.footprint_bytes) + (contender.ours ? " reserved" : " RSS");
        if (contender.label == "bfc") footprint += " (preallocated)";
      }
      std::string min_capacity = "-";
      if (summary.min_capacity_bytes) {
        min_capacity = show(live_ratio(results, trace, summary.min_capacity_bytes), 3) + " (" +
                       format_bytes(*summary.min_capacity_bytes) + ")";
      }
      out << "| " << trace << " | " << contender.label << (cell->errors.empty() ? "" : " (errors)") << " | " << latency
          << " | " << show(ratio(summary.warm_ns, jemalloc), 2) << " | " << show(summary.cold_ns, 1) << " | "
          << footprint << " | " << show(live_ratio(results, trace, summary.footprint_bytes), 3) << " | " << min_capacity
          << " |\n";
    }
  }
}

void print_instruction_table(std::ostream& out, const Results& results) {
  out << "| trace | allocator | instructions/pair warm | vs jemalloc | instructions/pair cold |\n"
         "|---|---|---:|---:|---:|\n";
  for (const std::string& trace : results.traces) {
    const Cell* jemalloc = find_cell(results, trace, "jemalloc");
    const std::optional<double> reference = jemalloc != nullptr ? jemalloc->warm_instructions : std::nullopt;
    for (const Contender& contender : results.contenders) {
      const Cell* cell = find_cell(results, trace, contender.label);
      if (cell == nullptr || !cell->cold_instructions) continue;
      out << "| " << trace << " | " << contender.label << " | " << show(cell->warm_instructions, 0) << " | "
          << show(ratio(cell->warm_instructions, reference), 2) << " | " << show(cell->cold_instructions, 0) << " |\n";
    }
  }
}

void print_targets(std::ostream& out, const std::vector<Target>& targets) {
  out << "| target | trace | measured | limit | result |\n|---|---|---:|---:|---|\n";
  for (const Target& target : targets) {
    out << "| " << target.name << " | " << target.trace << " | " << show(target.value, 3, " " + target.unit)
        << " | <= " << fixed(target.limit, 2) << " | "
        << (!target.value   ? "not measured"
            : target.pass() ? "PASS"
                            : "FAIL")
        << " |\n";
  }
}

nlohmann::json to_json(const Results& results, const std::vector<Target>& targets) {
  nlohmann::json json;
  for (const std::string& trace : results.traces) {
    nlohmann::json& entry = json["traces"][trace];
    entry["peak_live_bytes"] = results.peak_live_bytes.count(trace) ? results.peak_live_bytes.at(trace) : 0;
    entry["allocations"] = results.allocations.count(trace) ? results.allocations.at(trace) : 0;
    for (const Contender& contender : results.contenders) {
      const Cell* cell = find_cell(results, trace, contender.label);
      if (cell == nullptr) continue;
      const Summary summary = summarize(*cell, contender.ours);
      nlohmann::json& out = entry["allocators"][contender.label];
      if (summary.warm_ns) out["median_warm_ns_per_pair"] = *summary.warm_ns;
      if (summary.cold_ns) out["median_cold_ns_per_pair"] = *summary.cold_ns;
      if (summary.footprint_bytes) out["footprint_bytes"] = *summary.footprint_bytes;
      if (summary.min_capacity_bytes) out["min_capacity_bytes"] = *summary.min_capacity_bytes;
      out["latency_runs"] = cell->latency;
      out["footprint_runs"] = cell->footprint;
      if (cell->min_capacity) out["min_capacity_run"] = *cell->min_capacity;
      if (cell->cold_instructions) out["cold_instructions_per_pair"] = *cell->cold_instructions;
      if (cell->warm_instructions) out["warm_instructions_per_pair"] = *cell->warm_instructions;
      out["errors"] = cell->errors;
    }
  }
  for (const Target& target : targets) {
    nlohmann::json item{{"name", target.name},
                        {"trace", target.trace},
                        {"limit", target.limit},
                        {"unit", target.unit},
                        {"pass", target.pass()}};
    if (target.value) item["value"] = *target.value;
    json["targets"].push_back(item);
  }
  return json;
}

}  // namespace tp::bench

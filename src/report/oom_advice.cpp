// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/report/oom_advice.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "tensorpool/core/units.hpp"

namespace tp::report {
namespace {

// `pattern` with its first "{}" replaced by `value` (a pattern without one is returned as it is).
std::string fill(std::string pattern, const std::string& value) {
  const std::size_t at = pattern.find("{}");
  if (at != std::string::npos) pattern.replace(at, 2, value);
  return pattern;
}
std::string fill(const std::string& pattern, std::int64_t value) { return fill(pattern, std::to_string(value)); }
std::string fill(const std::string& pattern, bool value) {
  return fill(pattern, std::string(value ? "true" : "false"));
}

std::string allocator_text(const memory::MemoryConfig& config) {
  std::string text(memory::to_string(config.allocator));
  if (config.allocator != memory::AllocatorKind::system) {
    text += config.policy == memory::GrowthPolicy::grow ? " (growing)" : " (preallocated)";
  }
  return text;
}

// Peaks after rounding, per device: "8.00 MiB of 8.00 MiB on sim:0".
std::string peaks_text(const MemoryEstimate& estimate) {
  std::string peaks;
  for (const DeviceEstimate& device : estimate.devices) {
    peaks +=
        fmt::format("{}{} of {} on {}", peaks.empty() ? "" : ", ", format_bytes(device.planned_peak_allocated_bytes),
                    format_bytes(device.limit_bytes), device.device);
  }
  return peaks;
}

struct Alternative {
  std::string flags;
  ConfigChange change;
};

// Settings other than the device's own that could serve the same allocations: another allocator, or BFC's
// other growth policy (a preallocated region has no seams between growth regions; a growing one may round
// less). Only the ones a replay confirms are named.
std::vector<Alternative> alternatives(const memory::MemoryConfig& config, const AdviceWords& words) {
  using memory::AllocatorKind;
  using memory::GrowthPolicy;
  std::vector<Alternative> candidates;
  if (config.allocator != AllocatorKind::expandable) {
    candidates.push_back({words.expandable, [](memory::MemoryConfig& c) { c.allocator = AllocatorKind::expandable; }});
  }
  if (config.allocator == AllocatorKind::bfc) {
    const bool growing = config.policy == GrowthPolicy::grow;
    candidates.push_back({fill(words.allow_growth, !growing), [growing](memory::MemoryConfig& c) {
                            c.policy = growing ? GrowthPolicy::preallocate : GrowthPolicy::grow;
                          }});
  } else {
    for (const GrowthPolicy policy : {GrowthPolicy::grow, GrowthPolicy::preallocate}) {
      candidates.push_back(
          {fill(words.bfc_allow_growth, policy == GrowthPolicy::grow), [policy](memory::MemoryConfig& c) {
             c.allocator = AllocatorKind::bfc;
             c.policy = policy;
           }});
    }
  }
  return candidates;
}

// The variables alone exceed a device: no batch size helps, only more memory or fewer variables per device.
// Devices with the same figures (the replicas of a mirrored model) share one sentence.
std::string variables_advice(const MemoryEstimate& estimate, const std::vector<device::Device*>& devices,
                             const std::string& allocator, const AdviceWords& words) {
  struct Shortage {
    std::size_t parameter_bytes, optimizer_state_bytes, limit_bytes;
    std::string names;
  };
  std::vector<Shortage> shortages;
  for (const DeviceEstimate& device : estimate.devices) {
    if (device.variables_fit) continue;
    const auto bytes_of = [&device](const char* kind) {
      const auto found = device.bytes_by_kind.find(kind);
      return found == device.bytes_by_kind.end() ? std::size_t{0} : found->second;
    };
    const Shortage shortage{bytes_of("parameter"), bytes_of("optimizer_state"), device.limit_bytes, device.device};
    const auto same = std::find_if(shortages.begin(), shortages.end(), [&shortage](const Shortage& other) {
      return other.parameter_bytes == shortage.parameter_bytes &&
             other.optimizer_state_bytes == shortage.optimizer_state_bytes && other.limit_bytes == shortage.limit_bytes;
    });
    if (same == shortages.end()) {
      shortages.push_back(shortage);
    } else {
      same->names += ", " + shortage.names;
    }
  }
  std::string advice;
  for (const Shortage& shortage : shortages) {
    // Every replica holds all the parameters; ZeRO-1 divides only the optimizer state among the devices.
    const bool parameters_alone = shortage.parameter_bytes >= shortage.limit_bytes;
    const bool several = shortage.names.find(',') != std::string::npos;
    advice += fmt::format(
        "The parameters need {} (optimizer state {}) on {}; {} has {}, so no batch size fits with the {} "
        "allocator: give it more memory ({}){}. ",
        format_bytes(shortage.parameter_bytes), format_bytes(shortage.optimizer_state_bytes), shortage.names,
        several ? "each device" : "the device", format_bytes(shortage.limit_bytes), allocator,
        // An opencl device's memory is the driver's (shared evenly by the logical devices on it), not a flag.
        shortage.names.find("opencl:") != std::string::npos
            ? "a larger TP_MEMORY_FRACTION, or fewer logical devices per OpenCL device: TP_OPENCL_DEVICES"
            : words.more_sim_memory,
        parameters_alone
            ? " or " + words.smaller_layers + "; every replica holds all the parameters, so more devices do not help"
        : devices.size() > 1
            ? ", or shard the optimizer state over the devices (" + words.shard_optimizer + ")"
            : ", or shard the optimizer state over several devices (" + words.mirrored_shard_optimizer + ")");
  }
  return advice;
}

}  // namespace

bool batch_fits(train::Sequential& model, const std::vector<device::Device*>& devices, std::int64_t batch_size,
                const ConfigChange& change, std::string_view batches_on) {
  const MemoryEstimate estimate = estimate_memory(model.plan(batch_size, batches_on), model, devices, batch_size,
                                                  {.arena_name = "train/arena", .change = change});
  return std::all_of(estimate.devices.begin(), estimate.devices.end(),
                     [](const DeviceEstimate& device) { return device.fits; });
}

std::int64_t largest_fitting_batch(train::Sequential& model, const std::vector<device::Device*>& devices,
                                   std::int64_t batch_size, std::string_view batches_on) {
  // A step's allocations only grow with the batch: binary search for the last batch that fits.
  std::int64_t low = 0, high = batch_size;  // fits(low) or low == 0; !fits(high) assumed
  while (high - low > 1) {
    const std::int64_t middle = low + (high - low) / 2;
    if (batch_fits(model, devices, middle, {}, batches_on)) {
      low = middle;
    } else {
      high = middle;
    }
  }
  return low;
}

void add_oom_advice(OutOfMemoryError& error, train::Sequential& model, const std::vector<device::Device*>& devices,
                    std::int64_t batch_size, std::string_view batches_on, const AdviceWords& words) {
  std::string advice;
  try {
    const OutOfMemoryReport& report = error.report();
    const MemoryEstimate current = estimate_memory(model.plan(batch_size, batches_on), model, devices, batch_size);
    const std::string allocator = devices.empty() ? "" : allocator_text(devices.front()->memory().config());
    const std::string too_many_variables = variables_advice(current, devices, allocator, words);
    if (!too_many_variables.empty()) {
      advice += too_many_variables;
    } else if (!devices.empty()) {
      const std::int64_t batch = largest_fitting_batch(model, devices, batch_size, batches_on);
      if (batch > 0) {
        advice +=
            fmt::format("{} fits: its allocations, replayed through the {} allocator, peak at {} (check it with {}). ",
                        fill(words.batch_size, batch), allocator,
                        peaks_text(estimate_memory(model.plan(batch, batches_on), model, devices, batch)),
                        fill(words.check_estimate, batch));
      } else {
        advice += fmt::format("not even {} fits with the {} allocator (peak after rounding {}). ",
                              fill(words.batch_size, std::int64_t{1}), allocator,
                              peaks_text(estimate_memory(model.plan(1, batches_on), model, devices, 1)));
      }
    }
    if (!devices.empty()) {
      std::string verified;
      for (const Alternative& alternative : alternatives(devices.front()->memory().config(), words)) {
        if (batch_fits(model, devices, batch_size, alternative.change, batches_on)) {
          verified += (verified.empty() ? "" : ", ") + alternative.flags;
        }
      }
      if (!verified.empty()) {
        advice += fmt::format("{} itself fits with {} (replayed the same way). ", fill(words.batch_size, batch_size),
                              verified);
      }
    }
    if (report.request_tag.name.ends_with("/arena")) {  // name what the arena holds: the step's tensors
      std::vector<const EstimateRow*> inside;
      for (const EstimateRow& row : current.rows) {
        if (row.device == report.device && row.placement == "in arena") inside.push_back(&row);
      }
      std::sort(inside.begin(), inside.end(),
                [](const EstimateRow* a, const EstimateRow* b) { return a->bytes > b->bytes; });
      std::string largest;
      for (std::size_t index = 0; index < std::min<std::size_t>(3, inside.size()); ++index) {
        largest += fmt::format("{}{} {}{} {}", index ? ", " : "", inside[index]->name, inside[index]->dtype,
                               shape_text(inside[index]->shape), format_bytes(inside[index]->bytes));
      }
      if (!largest.empty())
        advice += "The arena holds the step's tensors at planned offsets; its largest: " + largest + ". ";
    }
    if (!current.devices.empty() && too_many_variables.empty()) {
      const DeviceEstimate& first = current.devices.front();
      const auto state = first.bytes_by_kind.find("optimizer_state");
      if (state != first.bytes_by_kind.end() && first.planned_peak_bytes > 0) {
        // Sharded state shows up as per-replica shards; how the variables are named is the strategy's business,
        // so compare with the unsharded size instead: a parameter's two moments equal twice its bytes.
        const auto parameters = first.bytes_by_kind.find("parameter");
        const bool sharded = parameters != first.bytes_by_kind.end() && state->second < 2 * parameters->second;
        std::string how;
        if (!sharded) {
          how =
              devices.size() > 1
                  ? fmt::format(": {} (ZeRO-1) splits it across the {} devices", words.shard_optimizer, devices.size())
                  : fmt::format(": sharding it ({}, several devices) would divide it", words.mirrored_shard_optimizer);
        }
        advice += fmt::format(
            "Optimizer state holds {} ({:.0f}% of the planned peak on {}; Adam keeps two moments "
            "per parameter){}. ",
            format_bytes(state->second),
            100.0 * static_cast<double>(state->second) / static_cast<double>(first.planned_peak_bytes), first.device,
            how);
      }
    }
    const memory::Fragmentation pieces = report.fragmentation();
    if (report.is_fragmentation() && pieces.free_bytes > report.rounded_bytes) {
      advice += fmt::format(
          "Or trim() (MemoryStack::trim) between phases: {} are reserved but free in pieces of at most {} "
          "({:.1f}% external fragmentation); wholly free regions go back to the device and can be carved again "
          "in one piece.",
          format_bytes(pieces.free_bytes), format_bytes(pieces.largest_free_block), 100.0 * pieces.external);
    }
  } catch (const std::exception& planning) {
    advice += std::string("(no batch-size advice: planning failed: ") + planning.what() + ")";
  }
  while (!advice.empty() && advice.back() == ' ') advice.pop_back();
  error.amend([&advice](OutOfMemoryReport& report) { report.suggestion = advice; });
}

}  // namespace tp::report

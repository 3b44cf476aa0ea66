#include "oom_advice.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "memory_estimate.hpp"
#include "tensorpool/core/units.hpp"

namespace tp::cli {
namespace {

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string text = "[";
  for (std::size_t index = 0; index < dims.size(); ++index) text += (index ? "," : "") + std::to_string(dims[index]);
  return text + "]";
}

bool fits(train::Sequential& model, const std::vector<device::Device*>& devices, std::int64_t batch_size) {
  const MemoryEstimate estimate = estimate_memory(model.plan(batch_size), devices, batch_size);
  for (const DeviceEstimate& device : estimate.devices) {
    if (!device.fits || static_cast<double>(device.planned_peak_allocated_bytes) >
                            kPlanHeadroom * static_cast<double>(device.limit_bytes)) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::int64_t largest_fitting_batch(train::Sequential& model, const std::vector<device::Device*>& devices,
                                   std::int64_t batch_size) {
  // The planned peak grows with the batch: binary search for the last batch that fits.
  std::int64_t low = 0, high = batch_size;  // fits(low) or low == 0; !fits(high) assumed
  while (high - low > 1) {
    const std::int64_t middle = low + (high - low) / 2;
    if (fits(model, devices, middle)) {
      low = middle;
    } else {
      high = middle;
    }
  }
  return low;
}

void add_oom_advice(OutOfMemoryError& error, train::Sequential& model, const std::vector<device::Device*>& devices,
                    std::int64_t batch_size) {
  std::string advice;
  try {
    const OutOfMemoryReport& report = error.report();
    if (report.is_fragmentation()) {
      advice += "use the expandable allocator (--allocator expandable or TP_ALLOCATOR=expandable). ";
    }
    const std::int64_t batch = largest_fitting_batch(model, devices, batch_size);
    if (batch > 0) {
      const MemoryEstimate estimate = estimate_memory(model.plan(batch), devices, batch);
      std::string peaks;
      for (const DeviceEstimate& device : estimate.devices) {
        peaks += fmt::format("{}{} of {} on {}", peaks.empty() ? "" : ", ",
                             format_bytes(device.planned_peak_allocated_bytes), format_bytes(device.limit_bytes),
                             device.device);
      }
      advice += fmt::format(
          "--batch-size {} fits according to the estimate (planned peak {}; check it with "
          "`tensorpool estimate --batch-size {}`). ",
          batch, peaks, batch);
    } else {
      const MemoryEstimate smallest = estimate_memory(model.plan(1), devices, 1);
      advice += fmt::format(
          "not even --batch-size 1 fits within {:.0f}% of the limit according to the estimate "
          "(planned peak {} on {}, limit {}): raise the limit (--sim-memory) or spread the "
          "variables over more devices. ",
          100 * kPlanHeadroom, format_bytes(smallest.devices.front().planned_peak_allocated_bytes),
          smallest.devices.front().device, format_bytes(smallest.devices.front().limit_bytes));
    }
    const MemoryEstimate current = estimate_memory(model.plan(batch_size), devices, batch_size);
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
    if (!current.devices.empty()) {
      const DeviceEstimate& first = current.devices.front();
      const auto state = first.bytes_by_kind.find("optimizer_state");
      if (state != first.bytes_by_kind.end() && first.planned_peak_bytes > 0) {
        // Sharded state shows up as per-replica shards; how the variables are named is the strategy's business,
        // so compare with the unsharded size instead: a parameter's two moments equal twice its bytes.
        const auto parameters = first.bytes_by_kind.find("parameter");
        const bool sharded = parameters != first.bytes_by_kind.end() && state->second < 2 * parameters->second;
        std::string how;
        if (!sharded) {
          how = devices.size() > 1
                    ? fmt::format(": --shard optimizer (ZeRO-1) splits it across the {} devices", devices.size())
                    : ": sharding it (--strategy mirrored --shard optimizer, several devices) would divide it";
        }
        advice += fmt::format(
            "Optimizer state holds {} ({:.0f}% of the planned peak on {}; Adam keeps two moments "
            "per parameter){}. ",
            format_bytes(state->second),
            100.0 * static_cast<double>(state->second) / static_cast<double>(first.planned_peak_bytes), first.device,
            how);
      }
    }
    if (report.is_fragmentation() && report.reserved_bytes > report.in_use_bytes + report.rounded_bytes) {
      advice += fmt::format(
          "Or trim() (MemoryStack::trim) between phases: {} are reserved but free in pieces; "
          "wholly free regions go back to the device and can be carved again in one piece.",
          format_bytes(report.reserved_bytes - report.in_use_bytes));
    }
  } catch (const std::exception& planning) {
    advice += std::string("(no batch-size advice: planning failed: ") + planning.what() + ")";
  }
  while (!advice.empty() && advice.back() == ' ') advice.pop_back();
  error.amend([&advice](OutOfMemoryReport& report) { report.suggestion = advice; });
}

}  // namespace tp::cli

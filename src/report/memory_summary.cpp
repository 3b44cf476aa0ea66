// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/report/memory_summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"
#include "tensorpool/report/memory_estimate.hpp"

namespace tp::report {

std::vector<DeviceSummary> memory_summary(device::DeviceManager& manager, const std::vector<std::string>& names,
                                          const runtime::MemoryPlan& plan, const train::Sequential& model) {
  std::vector<DeviceSummary> devices;
  for (const std::string& name : names) {
    device::Device& device = manager.device(name);
    const memory::MemoryStats stats = device.memory().stats();
    DeviceSummary summary;
    summary.device = name;
    const memory::MemoryConfig& config = device.memory().config();
    summary.allocator = memory::to_string(config.allocator);
    if (config.allocator == memory::AllocatorKind::expandable && config.arena_shards > 1) {
      summary.allocator += fmt::format(" ({} shards)", config.arena_shards);
    }
    summary.policy = config.policy == memory::GrowthPolicy::grow ? "grow" : "preallocate";
    summary.peak_in_use_bytes = stats.peak_bytes_in_use;
    summary.reserved_bytes = stats.bytes_reserved;
    summary.peak_reserved_bytes = stats.peak_bytes_reserved;
    summary.fragmentation = stats.fragmentation_detail();
    for (const runtime::DevicePlan& device_plan : plan.devices) {
      if (device_plan.device != name) continue;
      summary.planned_peak_bytes = device_plan.planned_peak_bytes;
      summary.arena_bytes = device_plan.arena_bytes;
    }
    std::vector<SummaryTensor>& largest = summary.largest_tensors;
    if (memory::TrackingAdaptor* tracking = device.memory().tracking()) {
      for (const memory::TrackedAllocation& live : tracking->live_allocations()) {
        const bool arena = live.tag.kind == memory::AllocationKind::step_arena;  // the planned tensors' home
        if (!arena && live.tag.kind == memory::AllocationKind::parameter) summary.parameter_bytes += live.bytes;
        if (!arena && live.tag.kind == memory::AllocationKind::optimizer_state) {
          summary.optimizer_state_bytes += live.bytes;
        }
        largest.push_back({live.tag.name, arena ? "" : live.tag.dtype + shape_text(live.tag.shape),
                           std::string(memory::to_string(live.tag.kind)), live.bytes});
      }
    }
    summary.step = model.step_bytes(plan, name);
    for (std::size_t index = 0; index < plan.tensors.size(); ++index) {
      const runtime::PlannedTensor& tensor = plan.tensors[index];
      if (tensor.device == name && tensor.planned_bytes > 0) {
        largest.push_back({tensor.name, tensor.dtype + shape_text(tensor.shape),
                           std::string(train::to_string(summary.step.kinds[index])) + " (in arena)", tensor.bytes});
      }
    }
    std::sort(largest.begin(), largest.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
    largest.resize(std::min<std::size_t>(largest.size(), 6));
    // Shared (host-visible) memory is a stack of its own: its bytes are reported apart, never in the above.
    if (memory::MemoryStack* shared = device.shared_memory()) {
      const memory::MemoryStats shared_stats = shared->stats();
      SharedMemorySummary entry;
      entry.name = shared->config().device;
      entry.peak_in_use_bytes = shared_stats.peak_bytes_in_use;
      entry.reserved_bytes = shared_stats.bytes_reserved;
      for (const runtime::DevicePlan& device_plan : plan.devices) {
        if (device_plan.device == name) entry.fetched_bytes = device_plan.shared_bytes;
      }
      summary.shared = entry;
    }
    devices.push_back(std::move(summary));
  }
  return devices;
}

std::string summary_text(const std::vector<DeviceSummary>& devices) {
  std::string text = "\nMemory summary\n";
  for (const DeviceSummary& device : devices) {
    text += fmt::format("  {}: peak in use {}, reserved {} (peak {}), planned peak {}\n", device.device,
                        format_bytes(device.peak_in_use_bytes), format_bytes(device.reserved_bytes),
                        format_bytes(device.peak_reserved_bytes), format_bytes(device.planned_peak_bytes));
    text += "    " + memory::describe(device.fragmentation) + '\n';
    text += fmt::format("    allocator {}, {}\n", device.allocator,
                        device.policy == "grow" ? "grows on demand" : "preallocated");
    text += fmt::format("    parameters {}, optimizer state {}\n", format_bytes(device.parameter_bytes),
                        format_bytes(device.optimizer_state_bytes));
    text += "    " + live_at_peak_text(device.step, device.arena_bytes) + '\n';
    for (const SummaryTensor& tensor : device.largest_tensors) {
      text +=
          fmt::format("    {:>10}  {} {} ({})\n", format_bytes(tensor.bytes), tensor.name, tensor.shape, tensor.kind);
    }
    if (device.shared) {
      text += fmt::format("    shared memory {}: peak in use {}, reserved {}; fetched results {} per step\n",
                          device.shared->name, format_bytes(device.shared->peak_in_use_bytes),
                          format_bytes(device.shared->reserved_bytes), format_bytes(device.shared->fetched_bytes));
    }
  }
  return text;
}

nlohmann::json to_json(const std::vector<DeviceSummary>& devices) {
  nlohmann::json array = nlohmann::json::array();
  for (const DeviceSummary& device : devices) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const SummaryTensor& tensor : device.largest_tensors) {
      tensors.push_back(
          {{"name", tensor.name}, {"shape", tensor.shape}, {"kind", tensor.kind}, {"bytes", tensor.bytes}});
    }
    array.push_back({{"device", device.device},
                     {"allocator", device.allocator},
                     {"policy", device.policy},
                     {"peak_in_use_bytes", device.peak_in_use_bytes},
                     {"reserved_bytes", device.reserved_bytes},
                     {"peak_reserved_bytes", device.peak_reserved_bytes},
                     {"planned_peak_bytes", device.planned_peak_bytes},
                     {"fragmentation", device.fragmentation.external},
                     {"largest_free_block", device.fragmentation.largest_free_block},
                     {"free_bytes", device.fragmentation.free_bytes},
                     {"internal_fragmentation_bytes", device.fragmentation.internal_bytes.value_or(0)},
                     {"parameter_bytes", device.parameter_bytes},
                     {"optimizer_state_bytes", device.optimizer_state_bytes},
                     {"arena_bytes", device.arena_bytes},
                     {"arena_live_at_peak", live_at_peak_json(device.step)},
                     // sums of the step tensors' sizes (tensors never live together share arena memory)
                     {"activation_bytes", device.step.activation_bytes},
                     {"activation_gradient_bytes", device.step.activation_gradient_bytes},
                     {"weight_gradient_bytes", device.step.weight_gradient_bytes},
                     {"largest_tensors", tensors}});
    if (device.shared) {
      array.back()["shared_peak_in_use_bytes"] = device.shared->peak_in_use_bytes;
      array.back()["shared_reserved_bytes"] = device.shared->reserved_bytes;
      array.back()["shared_fetched_bytes"] = device.shared->fetched_bytes;
    }
  }
  return array;
}

}  // namespace tp::report

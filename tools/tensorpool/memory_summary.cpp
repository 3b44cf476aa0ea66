// SPDX-License-Identifier: Apache-2.0
#include "memory_summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iostream>

#include "memory_estimate.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"

namespace tp::cli {
namespace {

struct LargestTensor {
  std::string name, shape, kind;
  std::size_t bytes = 0;
};

}  // namespace

nlohmann::json memory_summary(device::DeviceManager& manager, const std::vector<std::string>& names,
                              const runtime::MemoryPlan& plan, const train::Sequential& model) {
  nlohmann::json devices = nlohmann::json::array();
  std::cout << "\nMemory summary\n";
  for (const std::string& name : names) {
    device::Device& device = manager.device(name);
    const memory::MemoryStats stats = device.memory().stats();
    std::size_t planned_peak = 0;
    for (const runtime::DevicePlan& device_plan : plan.devices) {
      if (device_plan.device == name) planned_peak = device_plan.planned_peak_bytes;
    }
    std::vector<LargestTensor> largest;
    std::size_t parameter_bytes = 0, optimizer_state_bytes = 0;  // the live variables, by kind
    if (memory::TrackingAdaptor* tracking = device.memory().tracking()) {
      for (const memory::TrackedAllocation& live : tracking->live_allocations()) {
        const bool arena = live.tag.kind == memory::AllocationKind::step_arena;  // the planned tensors' home
        if (!arena && live.tag.kind == memory::AllocationKind::parameter) parameter_bytes += live.bytes;
        if (!arena && live.tag.kind == memory::AllocationKind::optimizer_state) optimizer_state_bytes += live.bytes;
        largest.push_back({live.tag.name, arena ? "" : live.tag.dtype + shape_text(live.tag.shape),
                           std::string(memory::to_string(live.tag.kind)), live.bytes});
      }
    }
    const train::StepBytes split = model.step_bytes(plan, name);
    for (std::size_t index = 0; index < plan.tensors.size(); ++index) {
      const runtime::PlannedTensor& tensor = plan.tensors[index];
      if (tensor.device == name && tensor.planned_bytes > 0) {
        largest.push_back({tensor.name, tensor.dtype + shape_text(tensor.shape),
                           std::string(train::to_string(split.kinds[index])) + " (in arena)", tensor.bytes});
      }
    }
    std::sort(largest.begin(), largest.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
    largest.resize(std::min<std::size_t>(largest.size(), 6));
    std::cout << fmt::format("  {}: peak in use {}, reserved {} (peak {}), planned peak {}, fragmentation {:.1f}%\n",
                             name, format_bytes(stats.peak_bytes_in_use), format_bytes(stats.bytes_reserved),
                             format_bytes(stats.peak_bytes_reserved), format_bytes(planned_peak),
                             100.0 * stats.fragmentation());
    std::cout << fmt::format("    parameters {}, optimizer state {}\n", format_bytes(parameter_bytes),
                             format_bytes(optimizer_state_bytes));
    std::size_t arena_bytes = 0;
    for (const runtime::DevicePlan& device_plan : plan.devices) {
      if (device_plan.device == name) arena_bytes = device_plan.arena_bytes;
    }
    std::cout << "    " << live_at_peak_text(split, arena_bytes) << '\n';
    nlohmann::json tensors = nlohmann::json::array();
    for (const LargestTensor& tensor : largest) {
      std::cout << fmt::format("    {:>10}  {} {} ({})\n", format_bytes(tensor.bytes), tensor.name, tensor.shape,
                               tensor.kind);
      tensors.push_back(
          {{"name", tensor.name}, {"shape", tensor.shape}, {"kind", tensor.kind}, {"bytes", tensor.bytes}});
    }
    devices.push_back({{"device", name},
                       {"peak_in_use_bytes", stats.peak_bytes_in_use},
                       {"reserved_bytes", stats.bytes_reserved},
                       {"peak_reserved_bytes", stats.peak_bytes_reserved},
                       {"planned_peak_bytes", planned_peak},
                       {"fragmentation", stats.fragmentation()},
                       {"parameter_bytes", parameter_bytes},
                       {"optimizer_state_bytes", optimizer_state_bytes},
                       {"arena_bytes", arena_bytes},
                       {"arena_live_at_peak", live_at_peak_json(split)},
                       // sums of the step tensors' sizes (tensors never live together share arena memory)
                       {"activation_bytes", split.activation_bytes},
                       {"activation_gradient_bytes", split.activation_gradient_bytes},
                       {"weight_gradient_bytes", split.weight_gradient_bytes},
                       {"largest_tensors", tensors}});
    // Shared (host-visible) memory is a stack of its own: its bytes are reported apart, never in the above.
    if (memory::MemoryStack* shared = device.shared_memory()) {
      const memory::MemoryStats shared_stats = shared->stats();
      std::size_t fetched_bytes = 0;  // the step's fetched results, allocated there by each run
      for (const runtime::DevicePlan& device_plan : plan.devices) {
        if (device_plan.device == name) fetched_bytes = device_plan.shared_bytes;
      }
      std::cout << fmt::format("    shared memory {}: peak in use {}, reserved {}; fetched results {} per step\n",
                               shared->config().device, format_bytes(shared_stats.peak_bytes_in_use),
                               format_bytes(shared_stats.bytes_reserved), format_bytes(fetched_bytes));
      devices.back()["shared_peak_in_use_bytes"] = shared_stats.peak_bytes_in_use;
      devices.back()["shared_reserved_bytes"] = shared_stats.bytes_reserved;
      devices.back()["shared_fetched_bytes"] = fetched_bytes;
    }
  }
  return devices;
}

}  // namespace tp::cli

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The memory summary after training (train's "Memory summary", tensorpool.memory.memory_summary(model=...)):
// per device, what was measured (peak in use, reserved, fragmentation), what was planned, the live variables
// by kind, the step's planned bytes by kind and the largest tensors. Returned as data; summary_text() renders
// it as the CLI prints it and to_json() as --summary-json writes it.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/memory/fragmentation.hpp"
#include "tensorpool/runtime/memory_plan.hpp"
#include "tensorpool/train/plan_bytes.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::report {

struct SummaryTensor {
  std::string name;
  std::string shape;  // dtype and shape, "float32[784,512]"; empty for the arena itself
  std::string kind;   // an AllocationKind, or a step tensor's kind followed by " (in arena)"
  std::size_t bytes = 0;
};

// A device's shared (host-visible) memory: a stack of its own, reported apart from the device's figures.
struct SharedMemorySummary {
  std::string name;  // "opencl:0/shared"
  std::size_t peak_in_use_bytes = 0;
  std::size_t reserved_bytes = 0;
  std::size_t fetched_bytes = 0;  // the step's fetched results, allocated there by each run
};

struct DeviceSummary {
  std::string device;
  std::string allocator;  // the device stack's: "expandable" ("expandable (N shards)" with arena_shards N > 1) |
                          // "bfc" | "system"
  std::string policy;     // "grow" | "preallocate"
  std::size_t peak_in_use_bytes = 0;
  std::size_t reserved_bytes = 0;
  std::size_t peak_reserved_bytes = 0;
  std::size_t planned_peak_bytes = 0;
  memory::Fragmentation fragmentation;    // of the device's memory stack now (fragmentation.hpp)
  std::size_t parameter_bytes = 0;        // live variables, by kind
  std::size_t optimizer_state_bytes = 0;  // ...
  std::size_t arena_bytes = 0;
  train::StepBytes step;                       // the step's tensors by kind (sums, and live at the fullest step)
  std::vector<SummaryTensor> largest_tensors;  // at most six, largest first
  std::optional<SharedMemorySummary> shared;
};

// Measured figures come from the devices' memory stacks now: call it after the run. `plan` is `model`'s.
std::vector<DeviceSummary> memory_summary(device::DeviceManager& manager, const std::vector<std::string>& names,
                                          const runtime::MemoryPlan& plan, const train::Sequential& model);
// "\nMemory summary\n" then a few indented lines per device.
std::string summary_text(const std::vector<DeviceSummary>& devices);
// A JSON array, one object per device (the keys of --summary-json's "devices").
nlohmann::json to_json(const std::vector<DeviceSummary>& devices);

}  // namespace tp::report

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The per-tensor memory estimate of a training step, from the static plan (Session::plan): nothing is
// allocated on the devices. Each tensor with its kind (parameter, optimizer_state, weight_gradient for
// variables; step_arena; activation, activation_gradient, weight_gradient, other inside the arena: the
// vocabulary of OOM reports, the profiler and train's summary), shape, dtype, bytes (elements x dtype size) and bytes
// after rounding: variables and the step's arena are allocations of their own, and their allocated bytes come
// from replaying them, in the session's order, on a scratch stack of the device's configuration (so BFC's
// whole-chunk hand-outs are counted as the device will count them); step tensors live in the arena at planned
// offsets (rounded to the plan's 256-byte alignment; 0 when written in place over an input). Per device:
// totals per kind, the arena, the liveness lower bound and the planned peak (variables + arena), which a real
// step's peak of requested bytes equals exactly, and the peak in use after rounding. Fetched results that a
// device with shared memory allocates there (runtime::PlannedTensor::shared) are rows of their own, summed
// apart as shared_bytes: they are not in the device memory's peak.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "tensorpool/device/device.hpp"
#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/runtime/memory_plan.hpp"
#include "tensorpool/train/plan_bytes.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::report {

struct EstimateRow {
  // placement: "variable" | "arena" | "in arena" | "in place" | "shared" (a fetched result in the device's
  // shared memory, outside its peak) | "fed in place" (a batch already on the device, read where it is:
  // allocated_bytes 0)
  std::string device, name, kind, op, dtype, placement;
  std::vector<std::int64_t> shape;
  std::size_t bytes = 0;
  std::size_t allocated_bytes = 0;
};

struct DeviceEstimate {
  std::string device;
  std::size_t variable_bytes = 0;
  std::size_t arena_bytes = 0;
  std::size_t lower_bound_bytes = 0;
  std::size_t planned_peak_bytes = 0;            // requested: variables + arena
  std::size_t planned_peak_allocated_bytes = 0;  // in use after the allocator's rounding (replayed)
  std::size_t shared_bytes = 0;  // fetched results in the device's shared memory (as requested), not in the peaks
  std::string shared_memory;     // that memory's name ("opencl:0/shared"); empty on a device without one
  std::size_t limit_bytes = 0;
  // Device::planning_note(): empty for a real device; for a planning-only one (no GPU present), why its
  // figures are a plan for a device of the given capacity and not a measured device's.
  std::string planning_note;
  bool fits = true;                                  // the replay on the scratch stack served every allocation
  bool variables_fit = true;                         // ... every variable, before the arena
  std::map<std::string, std::size_t> bytes_by_kind;  // sum of the tensors' bytes (arena tensors reuse memory)
  train::StepBytes step;                             // the arena's tensors by kind, live at its fullest step
};

struct MemoryEstimate {
  std::int64_t batch_size = 0;
  std::vector<DeviceEstimate> devices;
  std::vector<EstimateRow> rows;  // by device, then variables, then step tensors in plan order
};

// Applied to a copy of each device's MemoryConfig before the replay: what another configuration would do
// (e.g. the expandable allocator) with the same limit and the same allocations.
using ConfigChange = std::function<void(memory::MemoryConfig&)>;

struct EstimateOptions {
  std::string arena_name = "train/arena";  // the tag of the session's arena ("<session name>/arena")
  ConfigChange change{};                   // when set, alters the replayed configuration (not the devices')
};

// `plan` is `model`'s (its graph tells the step's tensors apart); `devices` gives each planned device's
// memory configuration and limit (looked up by name).
MemoryEstimate estimate_memory(const runtime::MemoryPlan& plan, const train::Sequential& model,
                               const std::vector<device::Device*>& devices, std::int64_t batch_size,
                               const EstimateOptions& options = {});
nlohmann::json to_json(const MemoryEstimate& estimate);
// A step's arena split as live at its fullest planned step (adds up to at most the arena): JSON with the
// step and bytes per kind, and one line of text; shared with train's memory summary.
nlohmann::json live_at_peak_json(const train::StepBytes& step);
// A shape as the reports print it: "[784,512]".
std::string shape_text(const std::vector<std::int64_t>& dims);

std::string live_at_peak_text(const train::StepBytes& step, std::size_t arena_bytes);
void print_estimate(std::ostream& out, const MemoryEstimate& estimate);

}  // namespace tp::report

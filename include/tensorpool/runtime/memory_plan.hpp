// SPDX-License-Identifier: Apache-2.0
#pragma once
// What Session::plan() reports before a step runs: per device, the planned peak (persistent variables plus the
// step's arena) next to the liveness lower bound, the per-tensor layout of the arena, and the fetched results
// that live in the device's shared memory instead (reported apart).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensorpool/memory/allocation_tag.hpp"

namespace tp::runtime {

struct PlannedTensor {
  std::string name{};  // "dense/MatMul:0"; a copy from another device is "dense/MatMul:0@sim:1"
  std::string device{};
  std::string op{};
  std::string dtype{};
  std::vector<std::int64_t> shape{};
  memory::AllocationKind kind = memory::AllocationKind::activation;
  std::size_t bytes = 0;          // elements x dtype size
  std::size_t planned_bytes = 0;  // rounded; 0 for a tensor that reuses its input's memory in place
  std::size_t offset = 0;         // in the device's arena
  std::size_t first_step = 0;
  std::size_t last_step = 0;
  bool in_place = false;
  // A fetched result allocated per run from the device's shared memory (MemoryConfig::shared_kinds lists
  // `fetched`): outside the arena (planned_bytes 0, offset 0), counted in DevicePlan::shared_bytes.
  bool shared = false;
  // A feed whose tensor lives on this device already (Session::plan's fed_on): bound in place by each run,
  // outside the arena (planned_bytes 0, offset 0); its bytes belong to the caller's buffer, not to the plan.
  bool fed_in_place = false;
};

struct DevicePlan {
  std::string device;
  std::size_t variable_bytes = 0;      // persistent: variables placed on the device (as requested)
  std::size_t arena_bytes = 0;         // the step's planned arena
  std::size_t lower_bound_bytes = 0;   // max over steps of the live bytes (no plan can beat it)
  std::size_t planned_peak_bytes = 0;  // variable_bytes + arena_bytes: what the device holds during a step
  // Fetched results a run allocates from the device's shared memory (as requested), apart from the device
  // memory: not in planned_peak_bytes. 0 on devices without shared memory.
  std::size_t shared_bytes = 0;
  std::string strategy;  // the placement order that won, e.g. "size/best-fit"
};

struct MemoryPlan {
  std::vector<DevicePlan> devices;
  std::vector<PlannedTensor> tensors;
  // The persistent variables the step binds (kind parameter | optimizer_state | gradient, planned_bytes =
  // bytes, offset 0: each is its own allocation, outside the arena); they sum to each device's variable_bytes.
  std::vector<PlannedTensor> variables;
  std::vector<std::string> placement_log;
  std::size_t steps = 0;
};

}  // namespace tp::runtime

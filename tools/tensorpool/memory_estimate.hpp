#pragma once
// The per-tensor memory estimate of a training step, from the static plan (Session::plan): nothing is
// allocated on the devices. Each tensor with its kind, shape, dtype, bytes (elements x dtype size) and bytes
// after rounding: variables and the step's arena are allocations of their own, and their allocated bytes come
// from replaying them, in the session's order, on a scratch stack of the device's configuration (so BFC's
// whole-chunk hand-outs are counted as the device will count them); step tensors live in the arena at planned
// offsets (rounded to the plan's 256-byte alignment; 0 when written in place over an input). Per device:
// totals per kind, the arena, the liveness lower bound and the planned peak (variables + arena), which a real
// step's peak of requested bytes equals exactly, and the peak in use after rounding.
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

namespace tp::cli {

struct EstimateRow {
  std::string device, name, kind, op, dtype, placement;  // "variable" | "arena" | "in arena" | "in place"
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
  std::size_t limit_bytes = 0;
  bool fits = true;                                  // the replay on the scratch stack served every allocation
  bool variables_fit = true;                         // ... every variable, before the arena
  std::map<std::string, std::size_t> bytes_by_kind;  // sum of the tensors' bytes (arena tensors reuse memory)
};

struct MemoryEstimate {
  std::int64_t batch_size = 0;
  std::vector<DeviceEstimate> devices;
  std::vector<EstimateRow> rows;  // by device, then variables, then step tensors in plan order
};

// Applied to a copy of each device's MemoryConfig before the replay: what another configuration would do
// (e.g. the expandable allocator) with the same limit and the same allocations.
using ConfigChange = std::function<void(memory::MemoryConfig&)>;

// `devices` gives each planned device's memory configuration and limit (looked up by name); `arena_name` is
// the tag of the session's arena ("<session name>/arena"); `change`, when set, alters the replayed
// configuration (the devices themselves are not touched).
MemoryEstimate estimate_memory(const runtime::MemoryPlan& plan, const std::vector<device::Device*>& devices,
                               std::int64_t batch_size, const std::string& arena_name = "train/arena",
                               const ConfigChange& change = {});
nlohmann::json to_json(const MemoryEstimate& estimate);
void print_estimate(std::ostream& out, const MemoryEstimate& estimate);

}  // namespace tp::cli

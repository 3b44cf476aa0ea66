// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/report/memory_estimate.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::report {

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string text = "[";
  for (std::size_t index = 0; index < dims.size(); ++index) text += (index ? "," : "") + std::to_string(dims[index]);
  return text + "]";
}

nlohmann::json live_at_peak_json(const train::StepBytes& step) {
  return {{"step", step.peak_step},
          {"activation", step.live_activation_bytes},
          {"activation_gradient", step.live_activation_gradient_bytes},
          {"weight_gradient", step.live_weight_gradient_bytes},
          {"other", step.live_other_bytes}};
}

std::string live_at_peak_text(const train::StepBytes& step, std::size_t arena_bytes) {
  return fmt::format(
      "step arena {}; planned activations and gradients live at its fullest step ({}): activation {}, "
      "activation_gradient {}, weight_gradient {}, other {}",
      format_bytes(arena_bytes), step.peak_step, format_bytes(step.live_activation_bytes),
      format_bytes(step.live_activation_gradient_bytes), format_bytes(step.live_weight_gradient_bytes),
      format_bytes(step.live_other_bytes));
}

MemoryEstimate estimate_memory(const runtime::MemoryPlan& plan, const train::Sequential& model,
                               const std::vector<device::Device*>& devices, std::int64_t batch_size,
                               const EstimateOptions& options) {
  MemoryEstimate estimate;
  estimate.batch_size = batch_size;
  for (const runtime::DevicePlan& device_plan : plan.devices) {
    device::Device* device = nullptr;
    for (device::Device* candidate : devices) {
      if (candidate->name() == device_plan.device) device = candidate;
    }
    if (device == nullptr) {
      TP_THROW(InvalidArgument, "estimate", "the plan uses ", device_plan.device, ", which is not in --devices");
    }
    DeviceEstimate entry{
        .device = device_plan.device,
        .variable_bytes = device_plan.variable_bytes,
        .arena_bytes = device_plan.arena_bytes,
        .lower_bound_bytes = device_plan.lower_bound_bytes,
        .planned_peak_bytes = device_plan.planned_peak_bytes,
        .planned_peak_allocated_bytes = 0,
        .shared_bytes = device_plan.shared_bytes,
        .shared_memory = device->shared_memory() != nullptr ? device->shared_memory()->config().device : std::string(),
        .limit_bytes = device->memory().limit_bytes(),
        .planning_note = device->planning_note(),
        .fits = true,
        .bytes_by_kind = {},
        .step = {}};
    // The allocator's rounding is its own business (BFC hands a chunk below twice the request out whole), so
    // replay the step's allocations, in the session's order, on a scratch stack of the device's configuration:
    // the same allocator over simulated memory (reserved lazily by the OS, never touched).
    memory::MemoryConfig scratch_config = device->memory().config();
    scratch_config.tracking = false;
    if (options.change) options.change(scratch_config);
    std::unique_ptr<memory::MemoryStack> scratch =
        memory::make_sim_device_memory_stack(scratch_config, device->capacity_bytes());
    // The system allocator hands each request to the device's own source, which serves it in whole units of
    // its own (a page on sim, the buffer alignment on opencl), while the scratch source is simulated memory:
    // when the device runs `system`, its allocator layer reports its source's unit and each request counts
    // rounded to that. (A ConfigChange to `system` on another allocator keeps the scratch source's page.)
    const bool source_rounds = scratch_config.allocator == memory::AllocatorKind::system &&
                               device->memory().config().allocator == memory::AllocatorKind::system;
    const std::size_t source_unit = std::max<std::size_t>(1, device->memory().allocator().allocation_granularity());
    std::size_t source_in_use = 0;  // with source_rounds: the bytes the device's source would hand out
    std::vector<std::pair<void*, std::size_t>> held;
    std::size_t overflow = 0;  // bytes the scratch stack refused
    auto replay = [&](std::size_t bytes) -> std::size_t {
      if (bytes == 0) return 0;
      const std::size_t rounded = memory::round_up(bytes, source_unit);
      if (source_rounds) source_in_use += rounded;
      try {
        void* ptr = scratch->allocate(bytes);
        held.emplace_back(ptr, bytes);
        return source_rounds ? rounded : scratch->allocated_size(ptr, bytes);
      } catch (const OutOfMemoryError&) {
        entry.fits = false;  // the device would refuse it too: same allocator, same order
        overflow += bytes;
        return source_rounds ? rounded : bytes;
      }
    };
    for (const runtime::PlannedTensor& variable : plan.variables) {
      if (variable.device != entry.device) continue;
      const std::size_t allocated = replay(variable.bytes);
      const std::string kind(memory::to_string(variable.kind));
      entry.bytes_by_kind[kind] += variable.bytes;
      estimate.rows.push_back({entry.device, variable.name, kind, variable.op, variable.dtype, "variable",
                               variable.shape, variable.bytes, allocated});
    }
    entry.variables_fit = entry.fits;
    estimate.rows.push_back({entry.device,
                             options.arena_name,
                             std::string(memory::to_string(memory::AllocationKind::step_arena)),
                             "Session",
                             "",
                             "arena",
                             {},
                             device_plan.arena_bytes,
                             replay(device_plan.arena_bytes)});
    const memory::MemoryStats replayed = scratch->stats();
    entry.planned_peak_allocated_bytes =
        std::max(source_rounds ? source_in_use : replayed.peak_bytes_in_use + overflow, entry.planned_peak_bytes);
    for (const auto& [ptr, bytes] : held) scratch->deallocate(ptr, bytes);
    entry.step = model.step_bytes(plan, entry.device);
    for (std::size_t index = 0; index < plan.tensors.size(); ++index) {
      const runtime::PlannedTensor& tensor = plan.tensors[index];
      if (tensor.device != entry.device) continue;
      if (tensor.shared) {  // in the device's shared memory, not in its peak: reported apart
        estimate.rows.push_back({entry.device, tensor.name, std::string(memory::to_string(tensor.kind)), tensor.op,
                                 tensor.dtype, "shared", tensor.shape, tensor.bytes, tensor.bytes});
        continue;
      }
      const std::string kind(train::to_string(entry.step.kinds[index]));
      if (tensor.fed_in_place) {  // the caller's batch on the device, read in place: no bytes of the plan
        estimate.rows.push_back(
            {entry.device, tensor.name, kind, tensor.op, tensor.dtype, "fed in place", tensor.shape, tensor.bytes, 0});
        continue;
      }
      entry.bytes_by_kind[kind] += tensor.bytes;
      estimate.rows.push_back({entry.device, tensor.name, kind, tensor.op, tensor.dtype,
                               tensor.in_place ? "in place" : "in arena", tensor.shape, tensor.bytes,
                               tensor.planned_bytes});
    }
    estimate.devices.push_back(std::move(entry));
  }
  return estimate;
}

nlohmann::json to_json(const MemoryEstimate& estimate) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceEstimate& device : estimate.devices) {
    devices.push_back({{"device", device.device},
                       {"variable_bytes", device.variable_bytes},
                       {"arena_bytes", device.arena_bytes},
                       {"lower_bound_bytes", device.lower_bound_bytes},
                       {"planned_peak_bytes", device.planned_peak_bytes},
                       {"planned_peak_allocated_bytes", device.planned_peak_allocated_bytes},
                       {"shared_bytes", device.shared_bytes},
                       {"shared_memory", device.shared_memory},
                       {"limit_bytes", device.limit_bytes},
                       {"planning_only", !device.planning_note.empty()},
                       {"planning_note", device.planning_note},
                       {"fits", device.fits},
                       {"bytes_by_kind", device.bytes_by_kind},
                       {"arena_live_at_peak", live_at_peak_json(device.step)}});
  }
  nlohmann::json tensors = nlohmann::json::array();
  for (const EstimateRow& row : estimate.rows) {
    tensors.push_back({{"device", row.device},
                       {"name", row.name},
                       {"kind", row.kind},
                       {"op", row.op},
                       {"shape", row.shape},
                       {"dtype", row.dtype},
                       {"placement", row.placement},
                       {"bytes", row.bytes},
                       {"allocated_bytes", row.allocated_bytes}});
  }
  return {{"batch_size", estimate.batch_size}, {"devices", devices}, {"tensors", tensors}};
}

void print_estimate(std::ostream& out, const MemoryEstimate& estimate) {
  out << fmt::format("Memory estimate of one training step at batch {} (static plan; nothing allocated)\n",
                     estimate.batch_size);
  for (const DeviceEstimate& device : estimate.devices) {
    out << fmt::format("\n{}:\n", device.device);
    if (!device.planning_note.empty()) out << fmt::format("  {}: {}\n", device.device, device.planning_note);
    out << fmt::format("  {:<52} {:<19} {:<20} {:>12} {:>12}  {}\n", "tensor", "kind", "shape", "bytes", "allocated",
                       "where");
    for (const EstimateRow& row : estimate.rows) {
      if (row.device != device.device) continue;
      out << fmt::format("  {:<52} {:<19} {:<20} {:>12} {:>12}  {}\n", row.name, row.kind,
                         row.dtype + shape_text(row.shape), row.bytes, row.allocated_bytes, row.placement);
    }
    out << "  totals by kind (sums of tensor sizes; step tensors share the arena):";
    for (const auto& [kind, bytes] : device.bytes_by_kind) out << fmt::format(" {} {};", kind, format_bytes(bytes));
    out << '\n';
    out << fmt::format("  {}\n", live_at_peak_text(device.step, device.arena_bytes));
    out << fmt::format(
        "  planned peak on {}: {} ({} bytes) = variables {} + step arena {} (lower bound {}); {} after allocator "
        "rounding; limit {}{}\n",
        device.device, format_bytes(device.planned_peak_bytes), device.planned_peak_bytes,
        format_bytes(device.variable_bytes), format_bytes(device.arena_bytes), format_bytes(device.lower_bound_bytes),
        format_bytes(device.planned_peak_allocated_bytes), format_bytes(device.limit_bytes),
        device.fits ? "" : " (does NOT fit: the allocator refuses part of it)");
    if (device.shared_bytes > 0) {
      out << fmt::format("  shared memory {}: fetched results {} ({} bytes) per step, apart from the peak above\n",
                         device.shared_memory, format_bytes(device.shared_bytes), device.shared_bytes);
    }
  }
}

}  // namespace tp::report

// SPDX-License-Identifier: Apache-2.0
#include "runtime/step_dependencies.hpp"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/graph/op_registry.hpp"

namespace tp::runtime {

namespace {

bool overlaps(const Value& a, const Value& b) {
  return a.offset < b.offset + b.bytes() && b.offset < a.offset + a.bytes();
}

// Steps that write memory or have effects beyond their outputs: variable updates and collectives.
bool has_effects(const graph::Graph& graph, const Step& step) {
  if (step.kind != Step::Kind::kernel) return false;
  const graph::OpDef& op = graph::OpRegistry::global().get(graph.node(step.node).op);
  return op.stateful || op.collective;
}

// A planned value reuses arena memory of values that died before it was produced (or, in place, of its
// input): its producer must follow the producer and every reader of each of them, whatever stream they ran on.
void add_memory_hazards(Executable& executable) {
  for (const DeviceLayout& layout : executable.layouts) {
    for (std::size_t later : layout.values) {
      const Value& value = executable.values[later];
      if (value.bytes() == 0) continue;
      std::vector<std::size_t>& after = executable.steps[value.first_step].after;
      for (std::size_t earlier : layout.values) {
        const Value& old = executable.values[earlier];
        if (earlier == later || old.last_step > value.first_step || old.first_step >= value.first_step) continue;
        if (old.bytes() == 0 || !overlaps(old, value)) continue;
        after.push_back(old.first_step);
        for (std::size_t reader : old.readers) {
          if (reader != value.first_step) after.push_back(reader);
        }
      }
    }
  }
}

// A variable update must follow the earlier reads of the variable, and later reads must follow the update.
void add_variable_hazards(const graph::Graph& graph, Executable& executable) {
  for (const Value& value : executable.values) {
    if (!value.variable) continue;
    for (std::size_t position = 0; position < value.readers.size(); ++position) {
      const std::size_t writer = value.readers[position];
      if (!has_effects(graph, executable.steps[writer])) continue;
      for (std::size_t before = 0; before < position; ++before) {
        executable.steps[writer].after.push_back(value.readers[before]);
      }
      for (std::size_t later = position + 1; later < value.readers.size(); ++later) {
        executable.steps[value.readers[later]].after.push_back(writer);
      }
    }
  }
}

}  // namespace

void add_dependencies(const graph::Graph& graph, Executable& executable) {
  std::vector<Step>& steps = executable.steps;
  std::map<graph::NodeId, std::size_t> step_of;  // kernel and feed steps by node (copies are not targets)
  for (std::size_t index = 0; index < steps.size(); ++index) {
    if (steps[index].kind != Step::Kind::copy) step_of[steps[index].node] = index;
  }
  // Effects keep their schedule order among themselves on each device they touch (a collective touches every
  // participant's). Effects on different devices share no memory (what they read and write is ordered by the
  // data, memory and variable hazards), so no order between them: the replicas of a mirrored step apply
  // their updates at the same time instead of taking turns.
  std::map<const device::Device*, std::size_t> previous_effect;
  for (std::size_t index = 0; index < steps.size(); ++index) {
    Step& step = steps[index];
    for (std::size_t input : step.inputs) {
      const Value& value = executable.values[input];
      if (!value.variable) step.after.push_back(value.first_step);
    }
    if (step.kind == Step::Kind::kernel) {
      for (graph::NodeId control : graph.node(step.node).control_inputs) {
        const auto found = step_of.find(control);
        if (found != step_of.end()) step.after.push_back(found->second);
      }
    }
    if (has_effects(graph, step)) {
      std::vector<const device::Device*> devices = {step.device};
      for (const std::vector<std::size_t>* values : {&step.inputs, &step.outputs}) {
        for (std::size_t value : *values) devices.push_back(executable.values[value].device);
      }
      std::sort(devices.begin(), devices.end());
      devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
      for (const device::Device* device : devices) {
        const auto [previous, first] = previous_effect.try_emplace(device, index);
        if (!first) step.after.push_back(std::exchange(previous->second, index));
      }
    }
  }
  add_memory_hazards(executable);
  add_variable_hazards(graph, executable);
  for (std::size_t index = 0; index < steps.size(); ++index) {
    std::vector<std::size_t>& after = steps[index].after;
    std::sort(after.begin(), after.end());
    after.erase(std::unique(after.begin(), after.end()), after.end());
    std::erase(after, index);  // an update reading one variable twice, a step reading what it reuses
    if (!after.empty() && after.back() > index) {
      TP_THROW(InvalidArgument, "session", "internal: step ", index, " would wait for later step ", after.back());
    }
    for (std::size_t earlier : after) steps[earlier].successors.push_back(index);
  }
}

}  // namespace tp::runtime

namespace tp::runtime {

namespace {

std::size_t lanes_of(const device::Device& device, std::size_t inter_op_threads) {
  return std::max<std::size_t>(1, std::min(inter_op_threads, device.num_streams()));
}

// Kernels get a lane of their device: the lane of the same-device producer of their first input when that
// chain has not continued on it yet, else the next lane round robin.
void assign_lanes(const graph::Graph& graph, Executable& executable, std::size_t inter_op_threads) {
  std::map<const device::Device*, std::size_t> next_lane;
  std::vector<bool> continued(executable.steps.size(), false);
  executable.multi_lane = false;
  for (std::size_t index = 0; index < executable.steps.size(); ++index) {
    Step& step = executable.steps[index];
    step.lane = 0;
    const std::size_t lanes = lanes_of(*step.device, inter_op_threads);
    if (step.kind != Step::Kind::kernel || has_effects(graph, step) || lanes == 1) continue;
    bool placed = false;
    for (std::size_t input : step.inputs) {
      const Value& value = executable.values[input];
      if (value.variable || value.device != step.device) continue;
      const Step& producer = executable.steps[value.first_step];
      if (producer.kind == Step::Kind::kernel && producer.device == step.device && !continued[value.first_step]) {
        step.lane = producer.lane;
        continued[value.first_step] = true;
        placed = true;
      }
      break;
    }
    if (!placed) step.lane = next_lane[step.device]++ % lanes;
    executable.multi_lane = executable.multi_lane || step.lane != 0;
  }
}

std::vector<device::Stream*> streams_of(const Executable& executable, const Step& step) {
  std::vector<device::Stream*> streams{&step.device->stream(step.lane)};
  auto add = [&streams](device::Stream* stream) {
    if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
  };
  for (std::size_t input : step.inputs) add(&executable.values[input].device->stream(0));
  for (std::size_t output : step.outputs) add(&executable.values[output].device->stream(0));
  return streams;
}

}  // namespace

void assign_streams(const graph::Graph& graph, Executable& executable, std::size_t inter_op_threads) {
  assign_lanes(graph, executable, inter_op_threads);
  for (Step& step : executable.steps) {
    if (step.kind == Step::Kind::kernel && !has_effects(graph, step)) {
      step.streams = {&step.device->stream(step.lane)};  // a kernel reads and writes on its own stream only
    } else {
      step.streams = streams_of(executable, step);
    }
    step.record.assign(step.streams.size(), false);
    step.orders_devices =
        step.kind == Step::Kind::copy ||
        (step.kind == Step::Kind::kernel && graph::OpRegistry::global().get(graph.node(step.node).op).collective);
  }
  for (Step& step : executable.steps) {
    for (std::size_t earlier : step.after) {
      Step& producer = executable.steps[earlier];
      for (std::size_t position = 0; position < producer.streams.size(); ++position) {
        for (device::Stream* stream : step.streams) {
          if (must_wait(step, stream, producer.streams[position])) producer.record[position] = true;
        }
      }
    }
  }
  executable.streams_for_threads = inter_op_threads;
}

}  // namespace tp::runtime

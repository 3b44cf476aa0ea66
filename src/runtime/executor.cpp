// SPDX-License-Identifier: Apache-2.0
#include "runtime/executor.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "runtime/step_dependencies.hpp"

namespace tp::runtime {

Executor::Executor(const graph::Graph& graph, Executable& executable, const FeedMap& feeds,
                   const std::map<device::Device*, std::shared_ptr<memory::MemoryResource>>& memory,
                   ExecutorOptions options)
    : graph_(graph), executable_(executable), feeds_(feeds), memory_(memory), options_(options) {
  if (options_.planner) return;
  readers_left_ = std::make_unique<std::atomic<std::size_t>[]>(executable_.values.size());
  for (std::size_t index = 0; index < executable_.values.size(); ++index) {
    readers_left_[index].store(executable_.values[index].readers.size(), std::memory_order_relaxed);
  }
}

void Executor::run(StepRunner& runner) {
  runner.run(executable_.steps, [this](std::size_t index) { launch(index); });
}

void Executor::launch(std::size_t index) {
  Step& current = executable_.steps[index];
  wait_for_earlier_steps(current);
  allocate_outputs(current);
  enqueue(current);
  record_events(current);
  if (!options_.planner) release_values(current);
}

void Executor::wait_for_earlier_steps(const Step& current) {
  for (std::size_t earlier : current.after) {
    const Step& producer = executable_.steps[earlier];
    for (std::size_t position = 0; position < producer.streams.size(); ++position) {
      if (!producer.record[position]) continue;
      for (device::Stream* stream : current.streams) {
        if (must_wait(current, stream, producer.streams[position])) stream->wait(producer.recorded[position]);
      }
    }
  }
}

void Executor::allocate_outputs(const Step& current) {
  for (std::size_t output : current.outputs) {
    Value& value = executable_.values[output];
    if (value.fed_in_place) continue;                 // the fed tensor itself (enqueue binds it)
    if (options_.planner && !value.shared) continue;  // bound to its arena by Session::bind
    const graph::Node& node = graph_.node(value.output.node);
    memory::AllocationTag tag{value.name,
                              node.op,
                              value.shape.dims_vector(),
                              std::string(name_of(value.dtype)),
                              value.shared ? memory::AllocationKind::fetched : memory::AllocationKind::activation,
                              options_.step};
    // A shared result is a fresh allocation of each run, so the host of an earlier run still reading its own
    // in place never sees this run's bytes; it goes to the device's shared memory (Device::allocate routes
    // the `fetched` kind there), not through the session's resource, which charges device memory only.
    std::shared_ptr<Buffer> buffer = value.shared
                                         ? current.device->allocate(value.bytes(), tag)
                                         : current.device->allocate(value.bytes(), tag, memory_.at(current.device));
    value.tensor = Tensor::from_buffer(std::move(buffer), 0, value.shape, value.dtype);
  }
}

namespace {

// Whether `tensors` are, one for one, the tensors `values` are bound to now (same buffer, offset, shape and
// type): a kernel given either sees the same memory.
bool binds_current(const std::vector<Tensor>& tensors, const std::vector<std::size_t>& values,
                   const std::vector<Value>& all) {
  if (tensors.size() != values.size()) return false;
  for (std::size_t position = 0; position < values.size(); ++position) {
    const Tensor& kept = tensors[position];
    const Tensor& bound = all[values[position]].tensor;
    if (kept.buffer() != bound.buffer() || kept.offset_bytes() != bound.offset_bytes() ||
        kept.dtype() != bound.dtype() || kept.shape() != bound.shape()) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool Executor::keeps_context(const Step& current) const {
  if (!options_.planner) return false;  // online, every run allocates its values afresh
  // A `shared` result is allocated by each run, a feed bound in place is the caller's tensor of that run:
  // neither may outlive its run in a context.
  auto kept_between_runs = [this](std::size_t index) {
    const Value& value = executable_.values[index];
    return !value.shared && !value.fed_in_place;
  };
  return std::all_of(current.inputs.begin(), current.inputs.end(), kept_between_runs) &&
         std::all_of(current.outputs.begin(), current.outputs.end(), kept_between_runs);
}

graph::KernelContext& Executor::context_for(Step& current, std::optional<graph::KernelContext>& scratch) {
  const bool keep = keeps_context(current);
  if (keep && current.context != nullptr &&
      binds_current(current.context->inputs, current.inputs, executable_.values) &&
      binds_current(current.context->outputs, current.outputs, executable_.values)) {
    current.context->step = options_.step;
    return *current.context;
  }
  graph::KernelContext fresh{graph_.node(current.node), {}, {}, *current.streams[0], options_.step};
  fresh.inputs.reserve(current.inputs.size());
  for (std::size_t input : current.inputs) fresh.inputs.push_back(executable_.values[input].tensor);
  fresh.outputs.reserve(current.outputs.size());
  for (std::size_t output : current.outputs) fresh.outputs.push_back(executable_.values[output].tensor);
  if (!keep) return scratch.emplace(std::move(fresh));
  current.context = std::make_unique<graph::KernelContext>(std::move(fresh));
  return *current.context;
}

void Executor::enqueue(Step& current) {
  device::Stream& stream = *current.streams[0];
  switch (current.kind) {
    case Step::Kind::feed: {
      const Tensor& fed = feeds_.find(graph_.node(current.node).name)->second;
      Value& value = executable_.values[current.outputs[0]];
      if (value.fed_in_place) {
        // The fed tensor is a buffer of this device with the value's dtype and shape (the step was prepared
        // for it): kernels read it where it is, with no copy. Work the caller enqueued on it (on the device's
        // stream 0) comes first; the value's readers wait for this step as for a copy.
        device::Stream& producer = fed.device().stream(0);
        if (&producer != &stream) stream.wait(producer.record());
        value.tensor = fed;
        break;
      }
      const Tensor& slot = value.tensor;
      // The caller does not write into a fed tensor during run(), which synchronizes before returning: a
      // device that reads host memory in place copies the batch in one transfer on its own stream, without
      // the host first staging it (400 KB per step at batch 128, on the host's path to the next launch).
      device::copy(fed.device().stream(0), fed.buffer(), fed.offset_bytes(), stream, slot.buffer(), slot.offset_bytes(),
                   slot.nbytes(), device::SourceRelease::caller_synchronizes);
      break;
    }
    case Step::Kind::copy: {
      const Tensor& source = executable_.values[current.inputs[0]].tensor;
      const Tensor& target = executable_.values[current.outputs[0]].tensor;
      device::copy(source.device().stream(0), source.buffer(), source.offset_bytes(), stream, target.buffer(),
                   target.offset_bytes(), target.nbytes());
      break;
    }
    case Step::Kind::kernel: {
      std::optional<graph::KernelContext> scratch;
      current.kernel(context_for(current, scratch));
      break;
    }
  }
}

void Executor::record_events(Step& current) {
  current.recorded.resize(current.streams.size());  // allocates at the first run only
  for (std::size_t position = 0; position < current.streams.size(); ++position) {
    if (current.record[position]) current.recorded[position] = current.streams[position]->record();
  }
}

void Executor::release_values(const Step& current) {
  for (std::size_t output : current.outputs) {
    Value& value = executable_.values[output];
    if (value.readers.empty() && !value.fetched) value.tensor = Tensor();  // an output nothing reads
  }
  for (std::size_t position = 0; position < current.inputs.size(); ++position) {
    const std::size_t input = current.inputs[position];
    Value& value = executable_.values[input];
    if (value.variable || value.fetched) continue;
    // A step that reads a value twice (Mul(x, x)) is one reader.
    const auto first = current.inputs.begin() + static_cast<std::ptrdiff_t>(position);
    if (std::find(current.inputs.begin(), first, input) != first) continue;
    if (readers_left_[input].fetch_sub(1, std::memory_order_acq_rel) == 1) value.tensor = Tensor();
  }
}

}  // namespace tp::runtime

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/runtime/session.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/executable.hpp"
#include "runtime/executor.hpp"
#include "runtime/session_memory.hpp"
#include "runtime/step_dependencies.hpp"
#include "runtime/step_runner.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "tensorpool/graph/op_registry.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/ops/cast.hpp"
#include "tensorpool/ops/init.hpp"

namespace tp::runtime {

struct Session::State {
  graph::Graph graph;
  std::vector<device::Device*> devices;
  device::Device* default_device = nullptr;
  device::Device* cpu = nullptr;
  std::map<device::Device*, std::shared_ptr<memory::MemoryResource>> memory;  // the session's charge per device
  std::map<std::string, Tensor, std::less<>> variables;                       // by Variable node name
  std::map<std::string, std::unique_ptr<Executable>> executables;             // by step signature
  std::map<device::Device*, std::shared_ptr<Buffer>> arenas;                  // shared by the executables
  std::unique_ptr<StepRunner> runner;                                         // the inter-op threads
  // Where the latest run's work ends on each of its streams: the next run's other streams wait for these.
  std::vector<std::pair<device::Stream*, device::Event>> last_run_drained;
  std::shared_ptr<PendingRun::Ledger> ledger = std::make_shared<PendingRun::Ledger>();
};

namespace {

std::vector<device::Device*> visible_devices(device::DeviceManager& manager, const SessionOptions& options) {
  for (const auto& [name, config] : options.device_memory) {
    const device::DeviceId id = device::parse_device_id(name, "SessionOptions::device_memory key");
    if (!manager.initialised()) {
      manager.set_memory_config(id, config);
      continue;
    }
    const memory::MemoryConfig& actual = manager.device(id).memory().config();
    if (actual.policy != config.policy || actual.allocator != config.allocator ||
        actual.limit_bytes != config.limit_bytes || actual.fraction != config.fraction) {
      TP_THROW(InvalidArgument, "session", "session '", options.name, "' asks for its own memory configuration of ",
               name, ", but ", name,
               " already exists with another one; device memory is configured before the "
               "first session (or through TP_ALLOW_GROWTH / TP_ALLOCATOR / TP_MEMORY_FRACTION)");
    }
  }
  std::vector<device::Device*> all = manager.devices();
  if (options.visible_devices.empty()) return all;
  std::vector<device::Device*> visible;
  for (const std::string& name : options.visible_devices) visible.push_back(&manager.device(name));
  return visible;
}

std::string signature(const FeedTypes& feeds, const FeedDevices& fed_on, const std::vector<std::string>& fetches,
                      const std::vector<std::string>& targets) {
  std::string key;
  for (const auto& [name, type] : feeds) {
    key += name + "=" + type.to_string();
    const auto on = fed_on.find(name);
    if (on != fed_on.end()) key += "@" + on->second;
    key += ";";
  }
  key += "|";
  for (const std::string& fetch : fetches) key += fetch + ";";
  key += "|";
  for (const std::string& target : targets) key += target + ";";
  return key;
}

FeedTypes types_of(const FeedMap& feeds) {
  FeedTypes types;
  for (const auto& [name, tensor] : feeds) {
    if (!tensor.defined()) TP_THROW(InvalidArgument, "session", "feed '", name, "' is an undefined tensor");
    types[name] = graph::TensorType{tensor.dtype(), tensor.shape().dims_vector()};
  }
  return types;
}

// Where each fed tensor that may be bound in place lives: a device that is not host-accessible, at an offset
// the arena's values also start at (kernels see the alignment they see for planned values).
FeedDevices devices_of(const FeedMap& feeds) {
  FeedDevices on;
  for (const auto& [name, tensor] : feeds) {
    const device::Device& device = tensor.device();
    if (device.host_accessible() || tensor.nbytes() == 0 || tensor.offset_bytes() % compile::kPlanAlignment != 0)
      continue;
    on[name] = device.name();
  }
  return on;
}

memory::AllocationKind kind_of_variable(const graph::Node& node) {
  const std::string kind = graph::attribute_string(node, "kind", "parameter");
  if (kind == "parameter") return memory::AllocationKind::parameter;
  if (kind == "optimizer_state") return memory::AllocationKind::optimizer_state;
  if (kind == "gradient") return memory::AllocationKind::gradient;
  TP_THROW(InvalidArgument, "session", "Variable '", node.name, "': kind '", kind,
           "' is not parameter, optimizer_state or gradient");
}

// Fills a new variable from its `initializer` attribute (zeros by default).
void initialise(const graph::Node& node, const Tensor& tensor, device::Stream& stream) {
  const std::string initializer = graph::attribute_string(node, "initializer", "zeros");
  const auto seed = static_cast<std::uint64_t>(graph::attribute_int(node, "seed", 0));
  const ops::OpContext context{.stream = &stream};
  if (initializer == "zeros") {
    ops::fill(tensor, 0.0, context);
  } else if (initializer == "ones") {
    ops::fill(tensor, 1.0, context);
  } else if (initializer == "constant") {
    ops::fill(tensor, graph::attribute_float(node, "value"), context);
  } else if (initializer == "glorot_uniform") {
    ops::glorot_uniform(tensor, seed, context);
  } else if (initializer == "uniform") {
    ops::uniform(tensor, graph::attribute_float(node, "low", -0.05), graph::attribute_float(node, "high", 0.05), seed,
                 0, context);
  } else if (initializer == "normal") {
    ops::normal(tensor, graph::attribute_float(node, "mean", 0.0), graph::attribute_float(node, "stddev", 0.05), seed,
                0, context);
  } else {
    TP_THROW(InvalidArgument, "session", "Variable '", node.name, "': initializer '", initializer,
             "' is not zeros, ones, constant, glorot_uniform, uniform, normal or cast");
  }
}

}  // namespace

Session::Session(const graph::Graph& graph, SessionOptions options)
    : options_(std::move(options)), state_(std::make_unique<State>()) {
  graph.validate();
  state_->graph = graph;
  device::DeviceManager& manager = options_.devices != nullptr ? *options_.devices : device::DeviceManager::instance();
  state_->devices = visible_devices(manager, options_);
  for (device::Device* device : state_->devices) {
    if (device->kind() == device::DeviceKind::cpu && state_->cpu == nullptr) state_->cpu = device;
    if (device->kind() != device::DeviceKind::cpu && state_->default_device == nullptr) state_->default_device = device;
  }
  if (state_->cpu == nullptr) {
    state_->cpu = &manager.device("cpu:0");  // fetched results land on the host even when cpu:0 runs nothing
  }
  if (!options_.default_device.empty()) {
    state_->default_device = &manager.device(options_.default_device);
  } else if (state_->default_device == nullptr) {
    state_->default_device = state_->cpu;
  }
  if (options_.intra_op_threads < 0) {
    TP_THROW(InvalidArgument, "session", "intra_op_threads = ", options_.intra_op_threads, " must be >= 0");
  }
  // The CPU kernel settings go to the session's devices (cpu:0 first: it takes every option the others may,
  // so a refused value throws before any device has changed).
  const device::KernelOptions kernels{.intra_op_threads = options_.intra_op_threads,
                                      .gemm_library = options_.gemm_library};
  state_->cpu->configure_kernels(kernels);
  for (device::Device* device : state_->devices) {
    if (device != state_->cpu) device->configure_kernels(kernels);
  }
  if (options_.inter_op_threads < 0) {
    TP_THROW(InvalidArgument, "session", "inter_op_threads = ", options_.inter_op_threads,
             " must be >= 0 (0 or 1: ops one after another)");
  }
  state_->runner = std::make_unique<StepRunner>(static_cast<std::size_t>(std::max(1, options_.inter_op_threads)));
  for (device::Device* device : state_->devices) {
    state_->memory[device] = make_session_memory(*device, options_);
  }
}

Session::~Session() { close(); }

namespace {

// Waits for a device's work without reporting its errors (close() must not throw).
void drain(device::Device& device) noexcept {
  try {
    device.synchronize();
  } catch (...) {  // the run that enqueued the failing work has reported it, or never will
  }
}

}  // namespace

void Session::close() {
  std::lock_guard lock(mutex_);
  if (closed_) return;
  for (device::Device* device : state_->devices) drain(*device);
  state_->executables.clear();
  state_->arenas.clear();
  state_->variables.clear();
  for (device::Device* device : state_->devices) drain(*device);  // buffers held by finished tasks come back
  state_->memory.clear();
  closed_ = true;
}

namespace {

void check_open(bool closed, const std::string& name) {
  if (closed) TP_THROW(InvalidArgument, "session", "session '", name, "' is closed");
}

// A soft-placement line, at info. The placer's lines carry their "[placer] " prefix (MemoryPlan::placement_log
// returns them as they are); the logger adds it back.
void log_placement(std::string_view line) {
  constexpr std::string_view kPrefix = "[placer] ";
  if (line.starts_with(kPrefix)) line.remove_prefix(kPrefix.size());
  TP_LOG(info, "placer", line);
}

}  // namespace

Executable& Session::executable(const FeedTypes& feeds, const FeedDevices& fed_on,
                                const std::vector<std::string>& fetches, const std::vector<std::string>& targets) {
  check_open(closed_, options_.name);
  const std::string key = signature(feeds, fed_on, fetches, targets);
  auto found = state_->executables.find(key);
  if (found != state_->executables.end()) return *found->second;
  compile::PlacementOptions placement{state_->devices, state_->default_device, options_.soft_placement};
  if (std::find(placement.devices.begin(), placement.devices.end(), state_->cpu) == placement.devices.end()) {
    placement.devices.push_back(state_->cpu);
  }
  std::unique_ptr<Executable> prepared = prepare(state_->graph, feeds, fed_on, fetches, targets, placement);
  assign_streams(state_->graph, *prepared, state_->runner->threads());
  for (const std::string& line : prepared->placement_log) log_placement(line);
  return *state_->executables.emplace(key, std::move(prepared)).first->second;
}

std::shared_ptr<memory::MemoryResource> Session::memory_of(device::Device& device) {
  auto found = state_->memory.find(&device);
  if (found == state_->memory.end()) {  // cpu:0 reached by soft placement though not listed as visible
    found = state_->memory.emplace(&device, make_session_memory(device, options_)).first;
  }
  return found->second;
}

device::Device& Session::variable_device(graph::NodeId id) {
  const std::string& requested = state_->graph.node(id).device;
  if (requested.empty()) return *state_->default_device;
  for (device::Device* candidate : state_->devices) {
    if (candidate->name() == requested) return *candidate;
  }
  TP_THROW(InvalidArgument, "session", "Variable '", state_->graph.node(id).name, "' requests ", requested,
           ", which is not a device of session '", options_.name, "'");
}

Tensor& Session::variable(graph::NodeId id, device::Device& device) {
  const graph::Node& node = state_->graph.node(id);
  auto found = state_->variables.find(node.name);
  if (found != state_->variables.end()) {
    if (&found->second.device() != &device) {
      TP_THROW(InvalidArgument, "session", "Variable '", node.name, "' lives on ", found->second.device().name(),
               " but this step places it on ", device.name(), "; pin it with Node::device");
    }
    return found->second;
  }
  const DType dtype = graph::attribute_dtype(node, "dtype");
  const Shape shape(graph::attribute_ints(node, "shape"));
  memory::AllocationTag tag{node.name, "Variable", shape.dims_vector(), std::string(name_of(dtype)),
                            kind_of_variable(node)};
  Tensor tensor = Tensor::from_buffer(allocate_planned(device, byte_size(shape, dtype), tag), 0, shape, dtype);
  if (graph::attribute_string(node, "initializer", "zeros") == "cast") {
    // A derived copy (mixed precision's persistent compute copies): its source variable cast to its dtype.
    const std::string source = graph::attribute_string(node, "source");
    const std::optional<graph::NodeId> from = state_->graph.find(source);
    if (!from || state_->graph.node(*from).op != "Variable") {
      TP_THROW(InvalidArgument, "session", "Variable '", node.name, "': its source '", source,
               "' is not a Variable of the graph; the cast initializer needs one");
    }
    ops::cast_into(variable(*from, device), tensor, {.stream = &device.stream(0)});
  } else {
    initialise(node, tensor, device.stream(0));
  }
  return state_->variables.emplace(node.name, std::move(tensor)).first->second;
}

std::shared_ptr<Buffer> Session::allocate_planned(device::Device& device, std::size_t bytes,
                                                  const memory::AllocationTag& tag) {
  try {
    return device.allocate(bytes, tag, memory_of(device));
  } catch (const OutOfMemoryError& error) {
    // Compaction only gathers free memory: where less is free than the request (a real shortage, or the
    // session's quota), it would copy for nothing.
    const OutOfMemoryReport& report = error.report();
    if (report.free_bytes() < report.rounded_bytes || !compact(device)) throw;
  }
  return device.allocate(bytes, tag, memory_of(device));  // refused again: its report names the compaction
}

bool Session::compact(device::Device& device) {
  if (!options_.compact_on_oom || device.memory().config().allocator != memory::AllocatorKind::expandable) {
    return false;  // only the expandable arena moves blocks
  }
  // The session's work is done on every device before its buffers move (a copy between devices reads this
  // one's memory from another device's stream), and no kept context built over the old addresses is reused.
  for (const auto& [used, memory] : state_->memory) {
    for (std::size_t index = 0; index < used->num_streams(); ++index) used->stream(index).record().synchronize();
  }
  for (auto& [key, prepared] : state_->executables) {
    for (Step& step : prepared->steps) step.context = nullptr;
  }
  std::vector<std::shared_ptr<Buffer>> buffers;
  for (const auto& [name, tensor] : state_->variables) {
    if (&tensor.device() == &device) buffers.push_back(tensor.buffer());
  }
  const auto arena = state_->arenas.find(&device);
  if (arena != state_->arenas.end() && arena->second != nullptr) buffers.push_back(arena->second);
  const memory::CompactionResult result = device.compact(buffers);
  TP_LOG(info, "session", "session '", options_.name, "': ", device.name(), " refused an allocation; moved ",
         result.blocks_moved, " of the session's ", buffers.size(), " buffers there (",
         format_bytes(result.bytes_copied), " copied, ", format_bytes(result.bytes_remapped),
         " remapped) and gave back ", result.granules_freed, " granule(s); retrying once");
  return result.ran;
}

void Session::bind(Executable& executable) {
  // Variables are created (and initialised) at their first binding, in schedule order.
  for (Value& value : executable.values) {
    if (value.variable) value.tensor = variable(value.output.node, *value.device);
  }
  if (!options_.planner) return;
  // One arena per device, shared by every prepared step (runs are serialised, so steps never overlap): it
  // grows to the largest step's plan, and the device holds variables plus that largest arena.
  for (DeviceLayout& layout : executable.layouts) {
    std::shared_ptr<Buffer>& arena = state_->arenas[layout.device];
    if (arena == nullptr || arena->bytes() < layout.plan.arena_bytes) {
      for (auto& [key, prepared] : state_->executables) {  // drop every view of the old arena before it goes
        for (DeviceLayout& other : prepared->layouts) {
          if (other.device != layout.device || other.arena == nullptr) continue;
          other.arena = nullptr;
          for (std::size_t index : other.values) prepared->values[index].tensor = Tensor();
          for (Step& step : prepared->steps) step.context = nullptr;  // kept contexts view the old arena too
        }
      }
      arena = nullptr;
      memory::AllocationTag tag{options_.name + "/arena", "Session", {}, {}, memory::AllocationKind::step_arena};
      arena = allocate_planned(*layout.device, layout.plan.arena_bytes, tag);
    }
    if (layout.arena == arena) continue;
    layout.arena = arena;
    for (std::size_t index : layout.values) {
      Value& value = executable.values[index];
      value.tensor = Tensor::from_buffer(layout.arena, value.offset, value.shape, value.dtype);
    }
  }
}

namespace {

// Every stream a run of `step` enqueues work on, fetches' streams included, in first-use order.
std::vector<device::Stream*> streams_of(const Executable& step) {
  std::vector<device::Stream*> streams;
  auto add = [&streams](device::Stream* stream) {
    if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
  };
  for (const Step& current : step.steps) {
    for (device::Stream* stream : current.streams) add(stream);
  }
  for (std::size_t fetch : step.fetches) add(&step.values[fetch].device->stream(0));
  return streams;
}

// Managed memory migrates on demand: each device that prefetches steps (Device::prefetches_steps) is given
// every buffer the step's values on it live in (its arena, the variables, feeds bound in place), to move them
// to itself on its stream 0 ahead of the kernels. Other devices are not looked at.
void prefetch_step_memory(const Executable& step) {
  std::map<device::Device*, std::vector<std::shared_ptr<Buffer>>> buffers;
  for (const Value& value : step.values) {
    device::Device* device = value.device;
    if (device == nullptr || !device->prefetches_steps()) continue;
    const std::shared_ptr<Buffer>& buffer = value.tensor.buffer();
    if (buffer == nullptr || buffer->bytes() == 0) continue;
    std::vector<std::shared_ptr<Buffer>>& list = buffers[device];
    if (std::find(list.begin(), list.end(), buffer) == list.end()) list.push_back(buffer);
  }
  for (const auto& [device, list] : buffers) device->prefetch_step(device->stream(0), list);
}

}  // namespace

std::vector<Tensor> Session::run(const FeedMap& feeds, const std::vector<std::string>& fetches,
                                 const std::vector<std::string>& targets, const RunOptions& options) {
  std::vector<Tensor> results = run_async(feeds, fetches, targets, options).wait();
  std::lock_guard lock(mutex_);
  for (device::Device* device : state_->devices) device->synchronize();
  return results;
}

PendingRun Session::run_async(const FeedMap& feeds, const std::vector<std::string>& fetches,
                              const std::vector<std::string>& targets, const RunOptions& options) {
  std::lock_guard lock(mutex_);
  Executable& step = executable(types_of(feeds), devices_of(feeds), fetches, targets);
  for (const auto& [name, value] : step.feeds) {
    if (!feeds.contains(name)) TP_THROW(InvalidArgument, "session", "placeholder '", name, "' is not fed");
  }
  bind(step);
  if (step.run_streams.empty()) {                                       // the step's first run
    for (const Step& current : step.steps) memory_of(*current.device);  // launches then only look the memory up
    step.run_streams = streams_of(step);
  }
  const std::vector<device::Stream*>& streams = step.run_streams;
  // Runs in flight follow each other on every stream: a stream starts this run once the other streams have
  // finished the previous one (its own order covers itself), so no device overwrites a buffer that another
  // device's work of the previous run still reads (a collective's peer reads) or writes.
  // (A host device's stream runs its work inline, at launch: it has nothing in flight to order.)
  for (device::Stream* stream : streams) {
    if (stream->device().host_accessible()) continue;
    for (const auto& [other, drained] : state_->last_run_drained) {
      if (other != stream) stream->wait(drained);
    }
  }
  PendingRun pending;
  try {
    prefetch_step_memory(step);
    Executor(state_->graph, step, feeds, state_->memory, {.planner = options_.planner, .step = options.step})
        .run(*state_->runner);
    enqueue_fetches(step, streams, pending);
  } catch (...) {
    for (device::Device* device : state_->devices) drain(*device);
    throw;
  }
  state_->last_run_drained.clear();
  for (device::Stream* stream : streams) {
    pending.drained_.push_back(stream->record());
    state_->last_run_drained.emplace_back(stream, pending.drained_.back());
  }
  pending.streams_ = streams;
  for (const auto& [name, tensor] : feeds) pending.feeds_.push_back(tensor);
  pending.ledger_ = state_->ledger;
  {
    std::lock_guard ledger_lock(state_->ledger->mutex);
    pending.id_ = ++state_->ledger->launched;
  }
  pending.waited_ = false;
  return pending;
}

void Session::enqueue_fetches(Executable& step, const std::vector<device::Stream*>& streams, PendingRun& pending) {
  pending.host_ = state_->cpu;
  // A fetch is copied on its device's stream 0; values made on other lanes are complete only once those
  // lanes' work is.
  if (step.multi_lane) {
    for (device::Stream* stream : streams) {
      device::Stream& first = stream->device().stream(0);
      if (stream != &first) first.wait(stream->record());
    }
  }
  for (std::size_t fetch : step.fetches) {
    const Value& value = step.values[fetch];
    PendingRun::Fetch& out = pending.fetches_.emplace_back();
    out.name = value.name;
    out.shape = value.shape;
    out.dtype = value.dtype;
    if (value.device->host_accessible()) {  // its stream ran inline: the value is complete
      out.on_host = value.tensor.to(*state_->cpu, {.name = value.name, .kind = memory::AllocationKind::activation});
    } else {
      out.readback = value.device->read_to_host_async(value.device->stream(0), value.tensor.buffer(),
                                                      value.tensor.offset_bytes(), value.tensor.nbytes());
    }
  }
  // A shared result is read in place: the readback holds its buffer until PendingRun::wait has taken the
  // bytes, and the next run allocates its own. A feed bound in place is the caller's tensor: the enqueued
  // work and the PendingRun hold it, not the prepared step.
  for (std::size_t fetch : step.fetches) {
    if (step.values[fetch].shared) step.values[fetch].tensor = Tensor();
  }
  for (const auto& [name, index] : step.feeds) {
    if (step.values[index].fed_in_place) step.values[index].tensor = Tensor();
  }
  if (!options_.planner) {
    for (Value& value : step.values) {
      if (!value.variable) value.tensor = Tensor();
    }
  }
}

MemoryPlan Session::plan(const FeedTypes& feeds, const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets, const FeedDevices& fed_on) {
  std::lock_guard lock(mutex_);
  for (const auto& [name, device_name] : fed_on) {
    if (!feeds.contains(name)) {
      TP_THROW(InvalidArgument, "session", "plan: fed_on names '", name,
               "', which is not among the feeds; declare its type in the feeds, or drop it from fed_on");
    }
    const bool known = device_name == state_->cpu->name() ||
                       std::ranges::find(state_->devices, device_name, &device::Device::name) != state_->devices.end();
    if (!known) {
      TP_THROW(InvalidArgument, "session", "plan: feed '", name, "' is declared on ", device_name,
               ", which is not a device of session '", options_.name, "'; name one of its devices");
    }
  }
  // A host-accessible device's feed is copied into its slot, as run_async does (devices_of).
  FeedDevices bound;
  for (const auto& [name, device_name] : fed_on) {
    for (const device::Device* device : state_->devices) {
      if (device->name() == device_name && !device->host_accessible()) bound[name] = device_name;
    }
  }
  const Executable& step = executable(feeds, bound, fetches, targets);
  MemoryPlan plan;
  plan.steps = step.steps.size();
  plan.placement_log = step.placement_log;
  for (const DeviceLayout& layout : step.layouts) {
    DevicePlan device_plan;
    device_plan.device = layout.device->name();
    device_plan.arena_bytes = layout.plan.arena_bytes;
    device_plan.lower_bound_bytes = layout.plan.lower_bound_bytes;
    device_plan.strategy = layout.plan.strategy;
    plan.devices.push_back(device_plan);
  }
  auto device_plan_of = [&plan](const device::Device& device) -> DevicePlan& {
    for (DevicePlan& device_plan : plan.devices) {
      if (device_plan.device == device.name()) return device_plan;
    }
    DevicePlan added;
    added.device = device.name();
    plan.devices.push_back(added);
    return plan.devices.back();
  };
  for (const Value& value : step.values) {
    if (value.variable) {
      device_plan_of(*value.device).variable_bytes += value.bytes();
      const graph::Node& node = state_->graph.node(value.output.node);
      plan.variables.push_back({.name = node.name,
                                .device = value.device->name(),
                                .op = node.op,
                                .dtype = std::string(name_of(value.dtype)),
                                .shape = value.shape.dims_vector(),
                                .kind = kind_of_variable(node),
                                .bytes = value.bytes(),
                                .planned_bytes = value.bytes()});
      continue;
    }
    PlannedTensor tensor;
    tensor.name = value.name;
    tensor.device = value.device->name();
    tensor.op = value.op;
    tensor.dtype = std::string(name_of(value.dtype));
    tensor.shape = value.shape.dims_vector();
    tensor.bytes = value.bytes();
    const bool outside_arena = value.shared || value.fed_in_place;
    tensor.planned_bytes =
        value.in_place || outside_arena ? 0 : memory::round_up(value.bytes(), compile::kPlanAlignment);
    tensor.offset = outside_arena ? 0 : value.offset;
    tensor.shared = value.shared;
    tensor.fed_in_place = value.fed_in_place;
    if (value.shared) {
      tensor.kind = memory::AllocationKind::fetched;
      device_plan_of(*value.device).shared_bytes += value.bytes();
    }
    tensor.first_step = value.first_step;
    tensor.last_step = value.last_step;
    tensor.in_place = value.in_place;
    plan.tensors.push_back(std::move(tensor));
  }
  for (DevicePlan& device_plan : plan.devices) {
    device_plan.planned_peak_bytes = device_plan.variable_bytes + device_plan.arena_bytes;
  }
  return plan;
}

Tensor Session::read_variable(std::string_view name) {
  std::lock_guard lock(mutex_);
  check_open(closed_, options_.name);
  const auto found = state_->variables.find(name);
  if (found == state_->variables.end()) {
    TP_THROW(InvalidArgument, "session", "session '", options_.name, "' has no variable '", name,
             "' yet (variables are created by the first run that uses them)");
  }
  return found->second.to(*state_->cpu, {.name = std::string(name), .kind = memory::AllocationKind::parameter});
}

void Session::assign_variable(std::string_view name, const Tensor& value) {
  std::lock_guard lock(mutex_);
  check_open(closed_, options_.name);
  Tensor* target = nullptr;
  const auto found = state_->variables.find(name);
  if (found != state_->variables.end()) {
    target = &found->second;
  } else {
    const std::optional<graph::NodeId> node = state_->graph.find(name);
    if (!node || state_->graph.node(*node).op != "Variable") {
      TP_THROW(InvalidArgument, "session", "assign_variable: '", name, "' is not a Variable of the graph");
    }
    target = &variable(*node, variable_device(*node));
  }
  if (!value.defined() || value.dtype() != target->dtype() || value.shape() != target->shape()) {
    TP_THROW(InvalidArgument, "session", "assign_variable '", name, "': the variable is ", name_of(target->dtype()),
             target->shape(), " but the value is ",
             value.defined() ? std::string(name_of(value.dtype())) + value.shape().to_string() : "undefined");
  }
  device::copy(value.device().stream(0), value.buffer(), value.offset_bytes(), target->device().stream(0),
               target->buffer(), target->offset_bytes(), target->nbytes());
  target->device().synchronize();
}

std::vector<std::string> Session::variable_names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : state_->variables) names.push_back(name);
  return names;
}

memory::MemoryStats Session::memory_stats(std::string_view device_name) const {
  std::lock_guard lock(mutex_);
  for (const auto& [device, resource] : state_->memory) {
    if (device->name() == device_name) return resource->stats();
  }
  TP_THROW(InvalidArgument, "session", "session '", options_.name, "' holds no memory on ", device_name);
}

}  // namespace tp::runtime

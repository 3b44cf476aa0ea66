// SPDX-License-Identifier: Apache-2.0
#pragma once
// Executable: one prepared step of a Session: the pruned schedule with its copies between devices, every
// tensor value with its device, type and lifetime, and each device's static memory plan. Built once per
// (feed types, fetches, targets) and reused by every run of that step.
//
// Invariants: steps are in an order where every value is produced (by a feed, kernel or copy step, or bound
// as a variable) before any step reads it; a value's first_step <= last_step; values read by a step live on
// that step's device; each planned value of a device appears exactly once in its DeviceLayout; a `shared`
// value is fetched, not a variable, and in no DeviceLayout; a `fed_in_place` value is a feed's, on a device
// that is not host-accessible, not `shared`, and in no DeviceLayout.
//
// Concurrency: a step may start once every step in its `after` has been launched and its streams wait on
// their events (assign_streams). `after` holds the data producers, control inputs, every step that reads or
// writes memory of the arena this step's outputs reuse (the planner's reuse is only safe in that order),
// the readers a variable update must follow (and the updates a later read must follow), and the previous
// stateful or collective step. Every entry of `after` is a smaller index: schedule order is one valid order.

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensorpool/compile/placer.hpp"
#include "tensorpool/compile/static_planner.hpp"
#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/graph/graph.hpp"
#include "tensorpool/graph/op_registry.hpp"

namespace tp::runtime {

struct Value {
  std::string name;  // "node:index", with "@device" for a copy
  std::string op;
  graph::Output output;
  device::Device* device = nullptr;
  Shape shape;
  DType dtype = DType::f32;
  bool variable = false;  // bound to the session's persistent tensor of node `output.node`
  bool fetched = false;
  // A fetched result its device allocates from shared memory (MemoryConfig::shared_kinds lists
  // AllocationKind::fetched and the device has Device::shared_memory()): outside the arena's plan, allocated
  // afresh by each run when its step launches, and read by the host in place (no copy).
  bool shared = false;
  // A feed whose tensor lives on the placeholder's device (a buffer of it, e.g. a batch assembled in its shared
  // memory): each run binds the fed tensor as the value instead of copying it into an arena slot, so the value
  // has no slot (outside the arena's plan). The step was prepared for feeds on that device (the signature
  // says so), so a run feeding the tensor from elsewhere prepares, and plans, another step.
  bool fed_in_place = false;
  std::size_t first_step = 0;
  std::size_t last_step = 0;
  std::int64_t share_with = -1;      // a value this one may reuse in place
  std::vector<std::size_t> readers;  // steps that read the value, in schedule order
  std::size_t offset = 0;            // in the device's arena (planned values)
  bool in_place = false;
  Tensor tensor;  // bound when the step runs (or once, into the arena)

  std::size_t bytes() const { return byte_size(shape, dtype); }
};

struct Step {
  enum class Kind { feed, kernel, copy };
  Kind kind = Kind::kernel;
  graph::NodeId node = -1;            // the kernel's node, or the fed placeholder
  std::vector<std::size_t> inputs{};  // value indexes
  std::vector<std::size_t> outputs{};
  device::Device* device = nullptr;       // where the step runs (a copy: its destination)
  std::vector<std::size_t> after{};       // steps that must come first (see the invariants above)
  std::vector<std::size_t> successors{};  // the steps whose `after` holds this one
  // Set by assign_streams: the stream a kernel runs on is streams[0] (lane `lane` of its device); copies
  // and collectives also touch the other streams listed. record[i]: a later step on another stream waits
  // for this step's work on streams[i], so the run records an event there.
  std::size_t lane = 0;
  std::vector<device::Stream*> streams{};
  std::vector<bool> record{};
  // A copy or a collective: its transfers order the devices they join themselves (device::copy's events), so
  // it waits only for earlier work on other streams of the same device.
  bool orders_devices = false;
  // A kernel step: its node's kernel on its device's backend, resolved once when the step is prepared.
  std::function<void(graph::KernelContext&)> kernel{};
  // Launch state the Executor keeps from one run to the next, so that a steady-state launch allocates no
  // bookkeeping: `recorded[i]` is the event the latest run recorded where this step's work on streams[i]
  // ends (set where record[i]); `context` is a kernel step's context, built at its first launch and reused
  // while each tensor in it is still its value's (checked at every launch). Only a step whose values all keep
  // their tensors between runs (variables, planned values) keeps one; Session::bind drops it before the
  // values leave their arena, so that it never holds an old arena alive.
  std::vector<device::Event> recorded{};
  std::unique_ptr<graph::KernelContext> context{};
};

struct DeviceLayout {
  device::Device* device = nullptr;
  std::vector<std::size_t> values;  // planned values on the device, in request order (not `shared`, `fed_in_place`)
  compile::StaticPlan plan;
  std::shared_ptr<Buffer> arena;  // allocated at the first run with the planner on
};

struct Executable {
  std::vector<Step> steps;
  std::vector<Value> values;
  std::vector<DeviceLayout> layouts;
  std::map<std::string, std::size_t, std::less<>> feeds;  // placeholder name -> value
  std::vector<std::size_t> fetches;
  std::vector<std::string> placement_log;
  std::size_t streams_for_threads = 0;  // the inter-op thread count assign_streams last used (0: never)
  // Every stream a run enqueues work on, fetches' streams included, in first-use order: set by the session at
  // the step's first run (empty before).
  std::vector<device::Stream*> run_streams;
  bool multi_lane = false;  // some kernel runs on a stream other than its device's stream 0
};

// `fed_on`: placeholder name -> the device its fed tensor lives on; a feed placed on that device, when it is
// not host-accessible, is `fed_in_place`. Throws tp::InvalidArgument naming the offending name, node or feed
// before anything runs.
std::unique_ptr<Executable> prepare(const graph::Graph& graph,
                                    const std::map<std::string, graph::TensorType, std::less<>>& feeds,
                                    const std::map<std::string, std::string, std::less<>>& fed_on,
                                    const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                                    const compile::PlacementOptions& placement);
// Every feed copied into its slot.
inline std::unique_ptr<Executable> prepare(const graph::Graph& graph,
                                           const std::map<std::string, graph::TensorType, std::less<>>& feeds,
                                           const std::vector<std::string>& fetches,
                                           const std::vector<std::string>& targets,
                                           const compile::PlacementOptions& placement) {
  return prepare(graph, feeds, {}, fetches, targets, placement);
}

// "node" -> {node, 0}; "node:1" -> {node, 1}. Throws naming the text when unknown or out of range.
graph::Output resolve_output(const graph::Graph& graph, std::string_view text);

}  // namespace tp::runtime

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Session: runs a Graph on devices. run(feeds, fetches, targets) prunes the graph to what the fetches and
// targets need, specialises its types for the feeds, places nodes (compile/placer.hpp), inserts copies between
// devices, plans each device's memory (compile/static_planner.hpp) and executes the kernels on the devices' streams.
// The prepared step is cached per (feeds' types, fetches, targets), so a training loop prepares once.
//
// Memory: every byte the session holds on a device is allocated through its quota adaptor over the device's
// stack, charged to the session's client of the device's arbiter. With the planner on, a step runs from one
// arena per device allocated when the step is first prepared: in steady state a step makes no call into
// the device's allocator. Variables persist across runs (allocated at first use, initialised from their
// `initializer` attribute). Fetched tensors are returned on cpu:0 (host memory). close() (or the destructor)
// returns all of the session's device memory at once. When a device refuses a variable or an arena (holes
// between blocks, left by freed tensors or other sessions, hold the memory), the session compacts its own
// buffers there and retries once (SessionOptions::compact_on_oom; expandable allocator only).
//
// Thread safety: one run at a time per session (run() serialises callers); several sessions may run at once.
// run_async() launches a run and returns without waiting for it, so that the host prepares the next run
// while the devices work on this one.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/graph/graph.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/memory_stats.hpp"
#include "tensorpool/runtime/memory_plan.hpp"
#include "tensorpool/runtime/pending_run.hpp"
#include "tensorpool/runtime/session_options.hpp"

namespace tp::device {
class Device;
}

namespace tp::runtime {

struct Executable;

using FeedMap = std::map<std::string, Tensor, std::less<>>;               // placeholder name -> value
using FeedTypes = std::map<std::string, graph::TensorType, std::less<>>;  // placeholder name -> type
// Placeholder name -> the name of the device its fed tensor lives on ("opencl:0"), for plan().
using FeedDevices = std::map<std::string, std::string, std::less<>>;

class Session {
 public:
  // Copies the graph (later edits to it do not reach the session) and validates it.
  explicit Session(const graph::Graph& graph, SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Fetches are output names ("node" for output 0, "node:1"); targets are node names run for their effects.
  // Throws tp::InvalidArgument before any kernel runs for a missing feed, a feed of the wrong dtype or shape,
  // an unknown name; tp::OutOfMemoryError when the session's quota or the device is exhausted.
  std::vector<Tensor> run(const FeedMap& feeds, const std::vector<std::string>& fetches,
                          const std::vector<std::string>& targets = {}, const RunOptions& options = {});
  // run() without the wait: validates and launches the run's work, its fetches' copies to host memory
  // included, and returns once it is enqueued on the devices' streams; PendingRun::wait() returns the
  // fetches (pending_run.hpp). The next run may be launched before this one is waited for: on every stream
  // it runs after this one. The fed tensors are read in place until the run's work is done: the caller
  // writes nothing into them before wait() returns (the PendingRun keeps them alive).
  // A fed tensor that already lives on its placeholder's device (a buffer of that device, not a host-accessible
  // one, e.g. a batch assembled in its shared memory; its offset a multiple of kPlanAlignment) is bound as the
  // value in place: no copy, and no slot in the step's arena (the step is prepared for feeds on that device).
  PendingRun run_async(const FeedMap& feeds, const std::vector<std::string>& fetches,
                       const std::vector<std::string>& targets = {}, const RunOptions& options = {});

  // The memory plan of that step, without running it (and without allocating its arena). `fed_on` names the
  // device each feed's tensor will live on, where a run feeds it from there: such a feed of a placeholder
  // placed on that device (not a host-accessible one) is bound in place, with no slot in the plan (see
  // run_async). Throws tp::InvalidArgument when `fed_on` names a placeholder missing from `feeds` or a device
  // the session does not have.
  MemoryPlan plan(const FeedTypes& feeds, const std::vector<std::string>& fetches,
                  const std::vector<std::string>& targets = {}, const FeedDevices& fed_on = {});

  // Variables: a copy on cpu:0, and assignment from a tensor on any device (shape and dtype must match).
  Tensor read_variable(std::string_view name);
  void assign_variable(std::string_view name, const Tensor& value);
  std::vector<std::string> variable_names() const;

  // The session's own usage of a device (its quota adaptor's view).
  memory::MemoryStats memory_stats(std::string_view device) const;
  const SessionOptions& options() const noexcept { return options_; }
  const std::string& name() const noexcept { return options_.name; }

  // Returns every byte the session holds on every device; the session cannot run afterwards.
  void close();
  bool closed() const noexcept { return closed_; }

 private:
  struct State;
  Executable& executable(const FeedTypes& feeds, const FeedDevices& fed_on, const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets);
  std::shared_ptr<memory::MemoryResource> memory_of(device::Device& device);
  Tensor& variable(graph::NodeId id, device::Device& device);
  device::Device& variable_device(graph::NodeId id);
  void bind(Executable& executable);
  // A variable's or an arena's buffer from the session's memory on `device`; when the device refuses it while
  // as much memory as it asks is free (in pieces), compacts there (compact) and retries once.
  std::shared_ptr<Buffer> allocate_planned(device::Device& device, std::size_t bytes, const memory::AllocationTag& tag);
  // Moves the session's variables and arena on `device` together (Device::compact) once its work on every device
  // is done, when options().compact_on_oom and the device's allocator moves blocks; whether compaction ran.
  bool compact(device::Device& device);
  // Enqueues the copies of the run's fetches into host memory (after its work on `streams`) into `pending`;
  // in online mode also drops the step's values, which the enqueued work holds until it has run.
  void enqueue_fetches(Executable& step, const std::vector<device::Stream*>& streams, PendingRun& pending);

  SessionOptions options_;
  std::unique_ptr<State> state_;
  mutable std::mutex mutex_;  // serialises run(), plan(), variable access and close()
  bool closed_ = false;
};

}  // namespace tp::runtime

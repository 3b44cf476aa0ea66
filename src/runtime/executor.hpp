// SPDX-License-Identifier: Apache-2.0
#pragma once
// Executor: one run of a prepared step (Executable). It launches every step on the streams assign_streams
// gave it, through the session's StepRunner: a feed's copy into its slot (or, for a `fed_in_place` value, the
// fed tensor bound as the value), a copy between devices, or the kernel resolved when the step was prepared. Before a step's work, its streams wait for the events of the
// earlier steps it depends on; after it, it records the events later steps on other streams wait for.
//
// Memory: with the planner on, every value is already bound to its arena (Session::bind) and a run makes no
// allocator call on the device's memory; only a `shared` fetched result is allocated, from the device's shared
// memory, when its step launches (one small allocation per fetch and run). Online (planner off), a step
// allocates its outputs through the session's resource of their device (a `shared` one from shared memory),
// and a value is dropped once its last reader has launched (the enqueued work holds the buffer until it has
// run), or at once when nothing reads it.
//
// Launches replay what the first run built: a kernel step's context (its tensors, node and stream) is kept in
// the Step and reused while its tensors are still its values' (a cached context is checked against the
// values at each launch and rebuilt when one differs, so a replayed launch passes the kernel exactly what a
// fresh one would); the events a step records overwrite those of the previous run in place.
//
// Thread safety: one Executor serves one run. launch() is called by the runner's threads for distinct steps,
// each only after the steps in its `after` have returned from theirs; it touches only that step's values,
// context and events, the per-value reader counts (atomic) and what earlier steps recorded.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/executable.hpp"
#include "runtime/step_runner.hpp"
#include "tensorpool/device/event.hpp"
#include "tensorpool/graph/graph.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/runtime/session.hpp"

namespace tp::runtime {

struct ExecutorOptions {
  bool planner = true;    // values bound to their arenas; off: allocated per run through `memory`
  std::int64_t step = 1;  // the training step kernels see (RunOptions::step)
};

class Executor {
 public:
  // `memory` holds the session's resource of every device a step runs on. Everything passed in outlives the
  // Executor; `feeds` holds every placeholder the step feeds.
  Executor(const graph::Graph& graph, Executable& executable, const FeedMap& feeds,
           const std::map<device::Device*, std::shared_ptr<memory::MemoryResource>>& memory, ExecutorOptions options);

  // Launches every step on `runner`'s threads and returns once all are enqueued on their streams; rethrows
  // the first error a launch raised (later steps are then not launched).
  void run(StepRunner& runner);

 private:
  void launch(std::size_t index);
  void wait_for_earlier_steps(const Step& current);
  void allocate_outputs(const Step& current);
  void enqueue(Step& current);
  // The context a kernel step launches with: its cached one when it may keep one (see Step::context), else
  // `scratch` filled for this launch.
  graph::KernelContext& context_for(Step& current, std::optional<graph::KernelContext>& scratch);
  bool keeps_context(const Step& current) const;
  void record_events(Step& current);
  void release_values(const Step& current);

  const graph::Graph& graph_;
  Executable& executable_;
  const FeedMap& feeds_;
  const std::map<device::Device*, std::shared_ptr<memory::MemoryResource>>& memory_;
  const ExecutorOptions options_;
  // Online mode: per value, how many of its readers have not launched yet.
  std::unique_ptr<std::atomic<std::size_t>[]> readers_left_;
};

}  // namespace tp::runtime

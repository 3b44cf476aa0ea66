// SPDX-License-Identifier: Apache-2.0
#pragma once
// The order constraints between the steps of an Executable that let independent steps run at once.

#include "runtime/executable.hpp"
#include "tensorpool/graph/graph.hpp"

namespace tp::runtime {

// Fills every step's `after` and `successors` (the invariants are in executable.hpp). Needs the values'
// readers and the arena offsets the planner assigned.
void add_dependencies(const graph::Graph& graph, Executable& executable);

// Gives each step its lane and streams for up to `inter_op_threads` ops running at once: a device runs up
// to min(inter_op_threads, its stream count) kernels at once, one per stream; feeds, copies and collectives
// use stream 0. A chain of kernels stays on one lane where it can (no events inside a chain). Marks the
// events later steps on other streams need. With one thread every step uses stream 0.
void assign_streams(const graph::Graph& graph, Executable& executable, std::size_t inter_op_threads);

// Whether `step`'s work on `stream` must wait for an earlier step's work on `earlier_stream` (an event).
inline bool must_wait(const Step& step, const device::Stream* stream, const device::Stream* earlier_stream) {
  if (stream == earlier_stream) return false;  // stream order
  return !step.orders_devices || &stream->device() == &earlier_stream->device();
}

}  // namespace tp::runtime

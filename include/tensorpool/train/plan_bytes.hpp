// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where a training step's planned arena goes on one device, by what each tensor is:
//   activations:           per-example forward values (the build-time graph gives them an unknown batch
//                          dim): layer inputs and their casts, MatMul, BiasAdd, Relu, Softmax outputs...
//   activation gradients:  per-example gradients (autodiff's "gradients/..." nodes with a batch dim);
//   weight gradients:      gradients of the variables' shapes and their collective forms (AllReduce
//                          outputs and bucket, ReduceScatter shards);
//   other:                 fixed-size values that are not gradients: the variables' compute-dtype copies
//                          under mixed precision ("dense/kernel/Cast"), the loss and metrics scalars.
// Mixed precision halves the first three: activations, activation gradients and weight gradients are all
// float16/bfloat16 (the float32 update widens each weight gradient as it reads it).
//
// Two views of the same tensors: the sums of their sizes by kind (each planned tensor counts once; tensors
// computed in place in their input's memory are not counted again), which can exceed the arena because
// tensors that are never live together share its memory; and what is live at the step where the most
// planned bytes are live (an in-place result keeps its input's memory live until its own last use), which
// adds up to at most the arena.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tensorpool/graph/graph.hpp"
#include "tensorpool/runtime/memory_plan.hpp"

namespace tp::train {

// The kinds of a step's tensors, named as everywhere else (memory::AllocationKind's vocabulary):
// "activation", "activation_gradient", "weight_gradient", "other".
enum class StepTensorKind : std::uint8_t { activation, activation_gradient, weight_gradient, other };
std::string_view to_string(StepTensorKind kind) noexcept;

struct StepBytes {
  // Sums of sizes, by kind.
  std::size_t activation_bytes = 0;
  std::size_t activation_gradient_bytes = 0;
  std::size_t weight_gradient_bytes = 0;
  std::size_t other_bytes = 0;
  // Planned (rounded) bytes live at `peak_step`, the step where the most are, by kind: within the arena.
  std::size_t peak_step = 0;
  std::size_t live_activation_bytes = 0;
  std::size_t live_activation_gradient_bytes = 0;
  std::size_t live_weight_gradient_bytes = 0;
  std::size_t live_other_bytes = 0;
  // Each of plan.tensors' kind, by index (tensors on other devices too).
  std::vector<StepTensorKind> kinds;

  std::size_t live_bytes() const noexcept {
    return live_activation_bytes + live_activation_gradient_bytes + live_weight_gradient_bytes + live_other_bytes;
  }
};

// `graph` is the one the plan was made from (Sequential::step_bytes passes the model's). A device the plan
// does not mention gives zeros; a tensor whose node the graph lacks counts as other.
[[nodiscard]] StepBytes step_bytes(const runtime::MemoryPlan& plan, const graph::Graph& graph, std::string_view device);

}  // namespace tp::train

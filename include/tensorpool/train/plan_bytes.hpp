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
// Each planned tensor counts once at its size; tensors computed in place in their input's memory are not
// counted again. So the four sums are the bytes the plan lays out, before alignment padding.

#include <cstddef>
#include <string_view>

#include "tensorpool/graph/graph.hpp"
#include "tensorpool/runtime/memory_plan.hpp"

namespace tp::train {

struct StepBytes {
  std::size_t activation_bytes = 0;
  std::size_t activation_gradient_bytes = 0;
  std::size_t weight_gradient_bytes = 0;
  std::size_t other_bytes = 0;
};

// `graph` is the one the plan was made from (Sequential::step_bytes passes the model's). A device the plan
// does not mention gives zeros; a tensor whose node the graph lacks counts as other.
StepBytes step_bytes(const runtime::MemoryPlan& plan, const graph::Graph& graph, std::string_view device);

}  // namespace tp::train

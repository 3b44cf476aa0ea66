// SPDX-License-Identifier: Apache-2.0
// AllReduceAdam(g..., var..., m..., v...) [replicas = R, learning_rate, beta1, beta2, epsilon]: the mirrored
// update of P parameters over R replicas whose devices reach each other's memory (sim devices of one
// process), with the gradients' all-reduce folded into the update. Four groups of P * R inputs, each
// parameter-major (input p * R + r of a group is tensor p of replica r): the gradients, the parameters, Adam's
// m and v. No outputs; stateful (it writes every replica's parameters and slots).
//
// The replicas split each parameter's elements into R shares (share_of); replica r applies Adam to share r
// of its own var, m and v with the gradient g_0 + g_1 + ... + g_{R-1}, read in place from every replica, and
// stores the updated share into every other replica's var, m and v (ops::adam_update_across_peers with
// mirrors): the same sums, in the same order, as AllReduce's direct collective computes before ApplyAdam reads
// them, so every variable ends bitwise as it does on that path, and every replica holds the same values. What
// it saves is the all-reduce's pass (the sums are never stored, each block's sum is used while it is in cache)
// and all but one replica's update of each element (each block is copied to the peers while it is in cache).
//
// Stream order, as the direct collectives': each replica's update waits for every replica's earlier work
// (its gradients, and its reads of the variables), and each replica's later work waits for every replica's
// update (which read its gradients and wrote its variables' shares).
// Not differentiable.
#include <algorithm>
#include <utility>

#include "distribute/collective_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/distribute/collective_ops.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "tensorpool/ops/optimizer.hpp"

namespace tp::distribute::detail {

namespace {

constexpr std::size_t kGroups = 4;  // gradients, parameters, m, v

// Parameters per replica; throws naming the node when the inputs are not four groups of P * R.
std::size_t parameters_of(const Node& node, std::size_t inputs) {
  const std::int64_t replicas = graph::attribute_int(node, "replicas", 0);
  if (replicas <= 0 || inputs == 0 || inputs % (kGroups * static_cast<std::size_t>(replicas)) != 0) {
    TP_THROW(InvalidArgument, "graph", "AllReduceAdam '", node.name, "': ", inputs,
             " inputs are not four groups (gradients, parameters, m, v) of parameters x replicas = ", replicas);
  }
  return inputs / (kGroups * static_cast<std::size_t>(replicas));
}

// The elements [begin, end) of a parameter of n elements that `replica` of `replicas` updates: equal shares in
// whole 64-byte lines (16 elements, float32 or float64), so no two replicas write one cache line (the last
// shares may be empty).
std::pair<std::int64_t, std::int64_t> share_of(std::int64_t n, std::size_t replicas, std::size_t replica) {
  constexpr std::int64_t kLine = 16;
  const auto count = static_cast<std::int64_t>(replicas);
  const std::int64_t share = ((n + count - 1) / count + kLine - 1) / kLine * kLine;
  const auto index = static_cast<std::int64_t>(replica);
  return {std::min(n, index * share), std::min(n, (index + 1) * share)};
}

ops::AdamOptions options_of(const Node& node) {
  return {.learning_rate = graph::attribute_float(node, "learning_rate", 1e-3),
          .beta1 = graph::attribute_float(node, "beta1", 0.9),
          .beta2 = graph::attribute_float(node, "beta2", 0.999),
          .epsilon = graph::attribute_float(node, "epsilon", 1e-7)};
}

std::vector<TensorType> infer_all_reduce_adam(const InferenceContext& context) {
  const std::size_t parameters = parameters_of(context.node, context.inputs.size());
  const std::size_t slots = context.inputs.size() / kGroups;  // P * R
  for (std::size_t index = 0; index < slots; ++index) {
    const TensorType& gradient = context.inputs[index];
    const std::size_t first = index - index % (slots / parameters);  // replica 0's gradient of this parameter
    if (gradient.dtype != DType::f32 && gradient.dtype != DType::f64) {
      TP_THROW(InvalidArgument, "graph", "AllReduceAdam '", context.node.name, "': gradient ", index, " is ",
               gradient.to_string(), "; the folded update takes float32 or float64 (use AllReduce and ApplyAdam)");
    }
    for (std::size_t group = 0; group < kGroups; ++group) {
      const TensorType& other = context.inputs[group * slots + index];
      if (other != context.inputs[first]) {
        TP_THROW(InvalidArgument, "graph", "AllReduceAdam '", context.node.name, "': input ", group * slots + index,
                 " is ", other.to_string(), " but its parameter's gradient on replica 0 is ",
                 context.inputs[first].to_string());
      }
    }
  }
  (void)options_of(context.node);
  return {};
}

void all_reduce_adam_kernel(KernelContext& context) {
  const std::size_t parameters = parameters_of(context.node, context.inputs.size());
  const std::size_t slots = context.inputs.size() / kGroups;
  const std::size_t replicas = slots / parameters;
  if (context.step < 1) {
    TP_THROW(InvalidArgument, "graph", "AllReduceAdam '", context.node.name, "': step ", context.step,
             " must be >= 1 (the session passes the 1-based training step)");
  }
  const ops::AdamOptions options = options_of(context.node);
  auto input = [&](std::size_t group, std::size_t parameter, std::size_t replica) -> const Tensor& {
    return context.inputs[group * slots + parameter * replicas + replica];
  };
  auto stream_of = [&](std::size_t replica) -> device::Stream& { return input(1, 0, replica).device().stream(0); };
  std::vector<device::Event> ready;
  for (std::size_t replica = 0; replica < replicas; ++replica) ready.push_back(stream_of(replica).record());
  std::vector<device::Event> updated;
  for (std::size_t replica = 0; replica < replicas; ++replica) {
    device::Stream& stream = stream_of(replica);
    for (std::size_t other = 0; other < replicas; ++other) {
      if (other != replica) stream.wait(ready[other]);
    }
    for (std::size_t parameter = 0; parameter < parameters; ++parameter) {
      const auto [begin, end] = share_of(input(1, parameter, replica).num_elements(), replicas, replica);
      if (begin == end) continue;
      auto state_of = [&](std::size_t owner) {
        return ops::AdamState{.param = flat_range(input(1, parameter, owner), begin, end),
                              .m = flat_range(input(2, parameter, owner), begin, end),
                              .v = flat_range(input(3, parameter, owner), begin, end)};
      };
      std::vector<Tensor> gradients;  // in replica order on every replica: the same sums everywhere
      std::vector<ops::AdamState> mirrors;
      for (std::size_t other = 0; other < replicas; ++other) {
        gradients.push_back(flat_range(input(0, parameter, other), begin, end));
        if (other != replica) mirrors.push_back(state_of(other));
      }
      ops::adam_update_across_peers(state_of(replica), gradients, mirrors, context.step, options, {.stream = &stream});
    }
    updated.push_back(stream.record());
  }
  for (std::size_t replica = 0; replica < replicas; ++replica) {
    for (std::size_t other = 0; other < replicas; ++other) {
      if (other != replica) stream_of(replica).wait(updated[other]);
    }
  }
}

}  // namespace

void register_all_reduce_adam_op(OpRegistry& registry) {
  OpDef op;
  op.name = "AllReduceAdam";
  op.collective = true;
  op.stateful = true;
  op.infer = infer_all_reduce_adam;
  op.kernels = graph::every_backend(all_reduce_adam_kernel);
  registry.add(std::move(op));
}

}  // namespace tp::distribute::detail

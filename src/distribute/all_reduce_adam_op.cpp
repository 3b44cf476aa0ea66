// SPDX-License-Identifier: Apache-2.0
// AllReduceAdam(g..., var..., m..., v...) [replicas = R, learning_rate, beta1, beta2, epsilon, sharded_slots]:
// the mirrored update of P parameters over R replicas whose devices reach each other's memory (sim devices of
// one process), with the gradients' all-reduce folded into the update. Inputs come parameter-major (input
// p * R + r of a group is tensor p of replica r): P * R gradients, then P * R parameters, then Adam's slots:
//   sharded_slots = false (default): P * R m, then P * R v, every replica holding whole slots;
//   sharded_slots = true (ZeRO): R m, then R v, replica r's holding only its chunk of the P parameters laid
//     end to end (N elements; Communicator::chunk(N, R, r), ceil(N / R) elements, the last one's tail padding),
//     as the sharded update's shard_<r>/adam_m and adam_v.
// The gradients share their parameters' dtype, or are float16 / bfloat16 for float32 parameters (mixed
// precision): each addition is then rounded once to the 16-bit type, as AllReduce on them rounds it.
// compute_copies = true (16-bit gradients only): P * R more inputs at the end, parameter-major, the layers'
// compute copies of the parameters (Variables of the gradients' dtype and the parameters' shapes, which the
// forward pass reads in place of a Cast of each variable); every replica's copy ends equal to the cast of its
// updated parameter, written by the replica that updates each part, with the part.
// No outputs; stateful (it writes every replica's parameters and slots).
//
// Each replica updates one part of every parameter: share_of's whole cache lines of each parameter with whole
// slots, its chunk with sharded ones. Replica r applies Adam to its part of its own var, m and v with the
// gradient g_0 + g_1 + ... + g_{R-1}, read in place from every replica, and stores the updated part into
// every other replica's var (and, with whole slots, m and v) while it is in cache (ops::adam_update_across_peers
// with mirrors): the same sums, in the same order, as AllReduce's direct collective computes before ApplyAdam
// reads them, so every variable ends bitwise as it does on the AllReduce (or ReduceScatter) path, and every
// replica holds the same values. What it saves is the collectives' passes (the sums are never stored, each
// block's sum is used while it is in cache; with sharded slots also the all-gather) and all but one replica's
// update of each element.
//
// Stream order, as the direct collectives': each replica's update waits for every replica's earlier work
// (its gradients, and its reads of the variables), and each replica's later work waits for every replica's
// update (which read its gradients and wrote its variables' parts).
// Not differentiable.
#include <algorithm>
#include <tuple>
#include <utility>

#include "distribute/collective_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/distribute/collective_ops.hpp"
#include "tensorpool/distribute/communicator.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "tensorpool/ops/optimizer.hpp"

namespace tp::distribute::detail {

namespace {

// How a node's inputs split (see the header).
struct Form {
  std::size_t parameters = 0;  // P, per replica
  std::size_t replicas = 0;    // R
  bool sharded = false;        // sharded_slots: one m and one v per replica
  bool copies = false;         // compute_copies: P * R compute copies, the last inputs
};

// Throws naming the node when the inputs do not split as the form says.
Form form_of(const Node& node, std::size_t inputs) {
  const std::int64_t replicas = graph::attribute_int(node, "replicas", 0);
  const bool sharded = graph::attribute_bool(node, "sharded_slots", false);
  const bool copies = graph::attribute_bool(node, "compute_copies", false);
  if (replicas > 0) {
    const auto count = static_cast<std::size_t>(replicas);
    const std::size_t slots = sharded ? 2 * count : 0;  // inputs beyond the P * R groups
    const std::size_t groups = (sharded ? 2 : 4) + (copies ? 1 : 0);
    if (inputs > slots && (inputs - slots) % (groups * count) == 0) {
      return {
          .parameters = (inputs - slots) / (groups * count), .replicas = count, .sharded = sharded, .copies = copies};
    }
  }
  TP_THROW(InvalidArgument, "graph", "AllReduceAdam '", node.name, "': ", inputs, " inputs are not ",
           sharded ? "two groups (gradients, parameters) of parameters x replicas and an m and a v per replica"
                   : "four groups (gradients, parameters, m, v) of parameters x replicas",
           copies ? ", then a group of compute copies" : "", " = ", replicas);
}

// The first of the compute copies' inputs (form.copies).
std::size_t first_copy(const Form& form, std::size_t inputs) { return inputs - form.parameters * form.replicas; }

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
  const Form form = form_of(context.node, context.inputs.size());
  const std::size_t slots = form.parameters * form.replicas;  // P * R
  const std::size_t groups = form.sharded ? 2 : 4;
  std::int64_t total = 0;  // the parameters of one replica laid end to end; -1 when a shape is unknown
  for (std::size_t index = 0; index < slots; ++index) {
    const TensorType& gradient = context.inputs[index];
    const std::size_t first = index - index % form.replicas;      // replica 0's gradient of this parameter
    const TensorType& parameter = context.inputs[slots + first];  // replica 0's parameter
    // float32 or float64, or float16 / bfloat16 gradients of a float32 parameter (mixed precision's).
    const bool half = (gradient.dtype == DType::f16 || gradient.dtype == DType::bf16) && parameter.dtype == DType::f32;
    if (gradient.dtype != DType::f32 && gradient.dtype != DType::f64 && !half) {
      TP_THROW(InvalidArgument, "graph", "AllReduceAdam '", context.node.name, "': gradient ", index, " is ",
               gradient.to_string(), " for a ", parameter.to_string(),
               " parameter; the folded update takes gradients of the parameter's dtype, or float16 / bfloat16 ones "
               "for a float32 parameter (else use AllReduce and ApplyAdam)");
    }
    for (std::size_t group = 0; group < groups; ++group) {
      const TensorType& other = context.inputs[group * slots + index];
      // The gradients match replica 0's gradient; the parameters and slots its parameter, in shape and dtype.
      const TensorType& expected = group == 0 ? context.inputs[first] : parameter;
      if (other != expected || other.dims != gradient.dims) {
        TP_THROW(InvalidArgument, "graph", "AllReduceAdam '", context.node.name, "': input ", group * slots + index,
                 " is ", other.to_string(), " but its parameter's gradient on replica 0 is ",
                 context.inputs[first].to_string(), " and the parameter ", parameter.to_string());
      }
    }
    if (index % form.replicas == 0) {
      const std::int64_t elements = elements_of(gradient);
      total = total < 0 || elements < 0 ? -1 : total + elements;
    }
  }
  const std::size_t copies = form.copies ? first_copy(form, context.inputs.size()) : context.inputs.size();
  for (std::size_t index = copies; index < context.inputs.size(); ++index) {
    const TensorType& gradient = context.inputs[index - copies];
    const TensorType& parameter = context.inputs[slots + index - copies];
    const TensorType expected{gradient.dtype, parameter.dims};
    if (parameter.dtype != DType::f32 || (gradient.dtype != DType::f16 && gradient.dtype != DType::bf16) ||
        context.inputs[index] != expected) {
      TP_THROW(InvalidArgument, "graph", "AllReduceAdam '", context.node.name, "': compute copy input ", index, " is ",
               context.inputs[index].to_string(), " for a ", parameter.to_string(), " parameter with ",
               gradient.to_string(),
               " gradients; compute copies are float16 / bfloat16 copies of float32 "
               "parameters, of the gradients' dtype (drop compute_copies otherwise)");
    }
  }
  if (form.sharded) {
    const auto replicas = static_cast<std::int64_t>(form.replicas);
    const TensorType expected{context.inputs[slots].dtype, {total < 0 ? -1 : (total + replicas - 1) / replicas}};
    for (std::size_t index = 2 * slots; index < copies; ++index) {
      if (context.inputs[index] != expected) {
        TP_THROW(InvalidArgument, "graph", "AllReduceAdam '", context.node.name, "': slot input ", index, " is ",
                 context.inputs[index].to_string(), "; a replica's sharded m and v are ", expected.to_string(),
                 " (its chunk of the parameters laid end to end)");
      }
    }
  }
  (void)options_of(context.node);
  return {};
}

void all_reduce_adam_kernel(KernelContext& context) {
  const Form form = form_of(context.node, context.inputs.size());
  const std::size_t replicas = form.replicas;
  const std::size_t slots = form.parameters * replicas;
  if (context.step < 1) {
    TP_THROW(InvalidArgument, "graph", "AllReduceAdam '", context.node.name, "': step ", context.step,
             " must be >= 1 (the session passes the 1-based training step)");
  }
  const ops::AdamOptions options = options_of(context.node);
  // group 0: gradients, 1: parameters, 2 and 3: whole m and v
  auto input = [&](std::size_t group, std::size_t parameter, std::size_t replica) -> const Tensor& {
    return context.inputs[group * slots + parameter * replicas + replica];
  };
  auto shard = [&](std::size_t slot, std::size_t replica) -> const Tensor& {  // slot 0: m, 1: v
    return context.inputs[2 * slots + slot * replicas + replica];
  };
  const std::size_t copies = first_copy(form, context.inputs.size());
  // The part [begin, end) of a parameter's compute copy on a replica; undefined without copies.
  auto copy_of = [&](std::size_t parameter, std::size_t replica, std::int64_t begin, std::int64_t end) {
    return form.copies ? flat_range(context.inputs[copies + parameter * replicas + replica], begin, end) : Tensor{};
  };
  std::vector<std::int64_t> offsets{0};  // of each parameter, laid end to end
  for (std::size_t parameter = 0; parameter < form.parameters; ++parameter) {
    offsets.push_back(offsets.back() + input(1, parameter, 0).num_elements());
  }
  auto stream_of = [&](std::size_t replica) -> device::Stream& { return input(1, 0, replica).device().stream(0); };
  std::vector<device::Event> ready;
  for (std::size_t replica = 0; replica < replicas; ++replica) ready.push_back(stream_of(replica).record());
  std::vector<device::Event> updated;
  for (std::size_t replica = 0; replica < replicas; ++replica) {
    device::Stream& stream = stream_of(replica);
    for (std::size_t other = 0; other < replicas; ++other) {
      if (other != replica) stream.wait(ready[other]);
    }
    const auto chunk = Communicator::chunk(offsets.back(), replicas, replica);
    for (std::size_t parameter = 0; parameter < form.parameters; ++parameter) {
      // This replica's part [begin, end) of the parameter; whole slots hold it at the same place.
      std::int64_t begin = 0, end = 0, slot_begin = 0;
      if (form.sharded) {
        begin = std::max(offsets[parameter], chunk.first) - offsets[parameter];
        end = std::min(offsets[parameter + 1], chunk.second) - offsets[parameter];
        slot_begin = offsets[parameter] + begin - chunk.first;
      } else {
        std::tie(begin, end) = share_of(input(1, parameter, replica).num_elements(), replicas, replica);
        slot_begin = begin;
      }
      if (begin >= end) continue;
      auto slot_of = [&](std::size_t slot, std::size_t owner) {
        const Tensor& tensor = form.sharded ? shard(slot, owner) : input(2 + slot, parameter, owner);
        return flat_range(tensor, slot_begin, slot_begin + end - begin);
      };
      std::vector<Tensor> gradients;  // in replica order on every replica: the same sums everywhere
      std::vector<ops::AdamState> mirrors;
      for (std::size_t other = 0; other < replicas; ++other) {
        gradients.push_back(flat_range(input(0, parameter, other), begin, end));
        if (other == replica) continue;
        mirrors.push_back({.param = flat_range(input(1, parameter, other), begin, end),
                           .m = {},
                           .v = {},
                           .copy = copy_of(parameter, other, begin, end)});
        if (!form.sharded) {
          mirrors.back().m = slot_of(0, other);
          mirrors.back().v = slot_of(1, other);
        }
      }
      const ops::AdamState state{.param = flat_range(input(1, parameter, replica), begin, end),
                                 .m = slot_of(0, replica),
                                 .v = slot_of(1, replica),
                                 .copy = copy_of(parameter, replica, begin, end)};
      ops::adam_update_across_peers(state, gradients, mirrors, context.step, options, {.stream = &stream});
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

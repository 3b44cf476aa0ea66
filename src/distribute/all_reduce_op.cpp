// SPDX-License-Identifier: Apache-2.0
// AllReduce(g_{0,0}, ..., g_{0,R-1}, g_{1,0}, ..., g_{P-1,R-1}) [replicas = R, algorithm = "ring" |
// "reduce_to_one"]: a collective over R replicas' tensors, each replica on its own device, for P tensors per
// replica given parameter-major (input p * R + r is tensor p of replica r, so input i lives on replica i % R).
//
// Outputs, each on its replica's device (output j on the device of input j % inputs):
//   p * R + r           the elementwise sum over replicas of tensor p, on replica r (bitwise equal on all);
//   P * R + r           replica r's bucket: the P tensors' sums packed into one flat buffer, so the
//                       communicator runs once per step (gradient bucketing) instead of once per tensor
//                       (Communicator::all_reduce_parts); empty when P = 1;
//   P * R + R + r       the communicator's working space on replica r.
// With `unpack` = false (and P > 1) outputs p * R + r are empty: a consumer that reads the reduced bucket itself
// (ZeRO-1's sharded update reads its chunk of it) saves the unpacked copy's memory and time.
// Every output is planned by the executor like any tensor, so a steady-state step makes no allocator call.
// Not differentiable.
#include "distribute/collective_support.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/distribute/collective_ops.hpp"
#include "tensorpool/distribute/communicator.hpp"
#include "tensorpool/graph/attributes.hpp"

namespace tp::distribute::detail {

namespace {

std::vector<TensorType> infer_all_reduce(const InferenceContext& context) {
  const Layout layout = layout_of(context.node, context.inputs.size());
  const std::int64_t bucket = check_parameter_major(context, layout, "AllReduce");
  std::vector<TensorType> outputs(context.inputs.begin(), context.inputs.end());
  const DType dtype = context.inputs[0].dtype;
  if (layout.tensors > 1 && !attribute_bool(context.node, "unpack", true)) {
    for (TensorType& output : outputs) output.dims = {0};
  }
  const auto communicator = distribute::make_communicator(attribute_string(context.node, "algorithm", "ring"));
  const std::int64_t reduced = layout.tensors == 1 ? elements_of(context.inputs[0]) : bucket;
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    outputs.push_back(TensorType{dtype, {layout.tensors == 1 ? 0 : bucket}});
  }
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    const std::int64_t scratch = reduced < 0 ? -1 : communicator->scratch_elements(reduced, layout.replicas, replica);
    outputs.push_back(TensorType{dtype, {scratch}});
  }
  return outputs;
}

void all_reduce_kernel(distribute::Communicator& communicator, KernelContext& context) {
  const Layout layout = layout_of(context.node, context.inputs.size());
  const std::size_t count = layout.replicas * layout.tensors;
  std::vector<Tensor> reduced, scratch;
  std::vector<std::vector<Tensor>> parts(layout.replicas);
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    scratch.push_back(context.outputs[count + layout.replicas + replica]);
    for (std::size_t tensor = 0; tensor < layout.tensors; ++tensor) {
      parts[replica].push_back(context.inputs[tensor * layout.replicas + replica]);
    }
    // One tensor is reduced in its output; several in the replica's bucket, unpacked afterwards.
    reduced.push_back(context.outputs[layout.tensors == 1 ? replica : count + replica]);
  }
  // The communicator packs the tensors into the buckets, or (between peer devices) sums straight out of them.
  communicator.all_reduce_parts(parts, reduced, scratch);
  if (layout.tensors == 1 || !attribute_bool(context.node, "unpack", true)) return;
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    std::int64_t offset = 0;
    for (std::size_t tensor = 0; tensor < layout.tensors; ++tensor) {
      const Tensor& output = context.outputs[tensor * layout.replicas + replica];
      copy_within(flat_range(reduced[replica], offset, offset + output.num_elements()), output);
      offset += output.num_elements();
    }
  }
}

}  // namespace

void register_all_reduce_op(OpRegistry& registry) {
  OpDef all_reduce;
  all_reduce.name = "AllReduce";
  all_reduce.collective = true;
  all_reduce.infer = infer_all_reduce;
  all_reduce.kernels = collective_kernels(all_reduce_kernel);
  all_reduce.bind_kernel = bind_communicator(all_reduce_kernel);
  registry.add(std::move(all_reduce));
}

}  // namespace tp::distribute::detail

namespace tp::distribute {

void register_collective_ops(graph::OpRegistry& registry) {
  detail::register_all_reduce_op(registry);
  detail::register_sharding_ops(registry);
  detail::register_all_reduce_adam_op(registry);
}

void register_collective_ops() {
  // Initialised once, thread-safely, from code the caller references (as OpRegistry::global registers the
  // built-in ops); a throw leaves it uninitialised, so the next call tries again.
  static const bool registered = (register_collective_ops(graph::OpRegistry::global()), true);
  (void)registered;
}

}  // namespace tp::distribute

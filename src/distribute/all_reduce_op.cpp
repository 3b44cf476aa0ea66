// AllReduce(g_{0,0}, ..., g_{0,R-1}, g_{1,0}, ..., g_{P-1,R-1}) [replicas = R, algorithm = "ring" |
// "reduce_to_one"]: a collective over R replicas' tensors, each replica on its own device, for P tensors per
// replica given parameter-major (input p * R + r is tensor p of replica r, so input i lives on replica i % R).
//
// Outputs, each on its replica's device (output j on the device of input j % inputs):
//   p * R + r           the elementwise sum over replicas of tensor p, on replica r (bitwise equal on all);
//   P * R + r           replica r's bucket: the P tensors packed into one flat buffer, so the communicator
//                       runs once per step (gradient bucketing) instead of once per tensor; empty when P = 1;
//   P * R + R + r       the communicator's working space on replica r.
// Every output is planned by the executor like any tensor, so a steady-state step makes no allocator call.
// Not differentiable.
#include "graph/ops/op_support.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/distribute/communicator.hpp"
#include "tensorpool/graph/attributes.hpp"

namespace tp::graph::detail {

namespace {

struct Layout {
  std::size_t replicas = 0;
  std::size_t tensors = 0;  // per replica
};

Layout layout_of(const Node& node, std::size_t inputs) {
  const std::int64_t replicas = attribute_int(node, "replicas", static_cast<std::int64_t>(inputs));
  if (replicas <= 0 || inputs % static_cast<std::size_t>(replicas) != 0) {
    TP_THROW(InvalidArgument, "graph", "AllReduce '", node.name, "': ", inputs, " inputs do not split into ", replicas,
             " replicas");
  }
  return {static_cast<std::size_t>(replicas), inputs / static_cast<std::size_t>(replicas)};
}

std::int64_t elements_of(const TensorType& type) {
  std::int64_t elements = 1;
  for (std::int64_t dim : type.dims) elements = dim < 0 || elements < 0 ? -1 : elements * dim;
  return elements;
}

std::vector<TensorType> infer_all_reduce(const InferenceContext& context) {
  const Layout layout = layout_of(context.node, context.inputs.size());
  std::int64_t bucket = 0;
  for (std::size_t tensor = 0; tensor < layout.tensors; ++tensor) {
    const std::size_t first = tensor * layout.replicas;
    require_float(context, static_cast<int>(first), "tensor " + std::to_string(tensor));
    for (std::size_t replica = 1; replica < layout.replicas; ++replica) {
      if (context.inputs[first + replica] != context.inputs[first]) {
        TP_THROW(InvalidArgument, "graph", "AllReduce '", context.node.name, "': tensor ", tensor, " of replica ",
                 replica, " is ", context.inputs[first + replica].to_string(), " but replica 0's is ",
                 context.inputs[first].to_string());
      }
    }
    if (context.inputs[first].dtype != context.inputs[0].dtype) {
      TP_THROW(InvalidArgument, "graph", "AllReduce '", context.node.name, "': all tensors must share one dtype");
    }
    const std::int64_t elements = elements_of(context.inputs[first]);
    bucket = elements < 0 || bucket < 0 ? -1 : bucket + elements;
  }
  std::vector<TensorType> outputs(context.inputs.begin(), context.inputs.end());
  const DType dtype = context.inputs[0].dtype;
  const auto communicator = distribute::make_communicator(attribute_string(context.node, "algorithm", "ring"));
  const std::int64_t reduced = layout.tensors == 1 ? elements_of(context.inputs[0]) : bucket;
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    outputs.push_back(TensorType{dtype, {layout.tensors == 1 ? 0 : bucket}});
  }
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    const std::int64_t scratch =
        reduced < 0 ? -1 : communicator->scratch_elements(reduced, layout.replicas, replica);
    outputs.push_back(TensorType{dtype, {scratch}});
  }
  return outputs;
}

// source -> target on one device, in its stream order.
void copy_within(const Tensor& source, const Tensor& target) {
  device::Stream& stream = source.device().stream(0);
  device::copy(stream, source.buffer(), source.offset_bytes(), stream, target.buffer(), target.offset_bytes(),
               target.nbytes());
}

Tensor flat_range(const Tensor& tensor, std::int64_t begin, std::int64_t end) {
  return tensor.reshape(Shape{tensor.num_elements()}).slice(begin, end);
}

void all_reduce_kernel(KernelContext& context) {
  const Layout layout = layout_of(context.node, context.inputs.size());
  const std::size_t count = layout.replicas * layout.tensors;
  const auto communicator = distribute::make_communicator(attribute_string(context.node, "algorithm", "ring"));
  std::vector<Tensor> reduced, scratch;
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    scratch.push_back(context.outputs[count + layout.replicas + replica]);
  }
  if (layout.tensors == 1) {
    for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
      copy_within(context.inputs[replica], context.outputs[replica]);
      reduced.push_back(context.outputs[replica]);
    }
    communicator->all_reduce(reduced, scratch);
    return;
  }
  // Pack each replica's tensors into its bucket, reduce the buckets once, unpack into the outputs.
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    const Tensor& bucket = context.outputs[count + replica];
    std::int64_t offset = 0;
    for (std::size_t tensor = 0; tensor < layout.tensors; ++tensor) {
      const Tensor& input = context.inputs[tensor * layout.replicas + replica];
      copy_within(input, flat_range(bucket, offset, offset + input.num_elements()));
      offset += input.num_elements();
    }
    reduced.push_back(bucket);
  }
  communicator->all_reduce(reduced, scratch);
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

void register_collective_ops(OpRegistry& registry) {
  OpDef all_reduce;
  all_reduce.name = "AllReduce";
  all_reduce.collective = true;
  all_reduce.infer = infer_all_reduce;
  all_reduce.kernels = cpu_and_sim(all_reduce_kernel);
  registry.add(std::move(all_reduce));
}

}  // namespace tp::graph::detail

// AllReduce(g_0, ..., g_{R-1}) [algorithm = "ring" | "reduce_to_one"]: a collective over R replicas' tensors,
// each on its own device. Outputs 0..R-1: the elementwise sum, on each replica's device (bitwise equal);
// outputs R..2R-1: the communicator's working space on each device, planned by the executor like any tensor so
// that a steady-state step makes no allocator call. Not differentiable.
#include "graph/ops/op_support.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/distribute/communicator.hpp"
#include "tensorpool/graph/attributes.hpp"

namespace tp::graph::detail {

namespace {

std::vector<TensorType> infer_all_reduce(const InferenceContext& context) {
  const std::size_t participants = context.inputs.size();
  for (std::size_t index = 0; index < participants; ++index) {
    require_float(context, static_cast<int>(index), "replica " + std::to_string(index));
    if (context.inputs[index] != context.inputs[0]) {
      TP_THROW(InvalidArgument, "graph", "AllReduce '", context.node.name, "': replica ", index, " is ",
               context.inputs[index].to_string(), " but replica 0 is ", context.inputs[0].to_string());
    }
  }
  std::vector<TensorType> outputs(context.inputs.begin(), context.inputs.end());
  const TensorType& type = context.inputs[0];
  const auto communicator = distribute::make_communicator(attribute_string(context.node, "algorithm", "ring"));
  std::int64_t elements = 1;
  for (std::int64_t dim : type.dims) elements = dim < 0 || elements < 0 ? -1 : elements * dim;
  for (std::size_t index = 0; index < participants; ++index) {
    const std::int64_t scratch = elements < 0 ? -1 : communicator->scratch_elements(elements, participants, index);
    outputs.push_back(TensorType{type.dtype, {scratch}});
  }
  return outputs;
}

void all_reduce_kernel(KernelContext& context) {
  const std::size_t participants = context.inputs.size();
  const auto communicator = distribute::make_communicator(attribute_string(context.node, "algorithm", "ring"));
  std::vector<Tensor> results(context.outputs.begin(),
                              context.outputs.begin() + static_cast<std::ptrdiff_t>(participants));
  std::vector<Tensor> scratch(context.outputs.begin() + static_cast<std::ptrdiff_t>(participants),
                              context.outputs.end());
  for (std::size_t index = 0; index < participants; ++index) {
    const Tensor& input = context.inputs[index];
    const Tensor& result = results[index];
    device::Stream& stream = input.device().stream(0);
    device::copy(stream, input.buffer(), input.offset_bytes(), stream, result.buffer(), result.offset_bytes(),
                 result.nbytes());
  }
  communicator->all_reduce(results, scratch);
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

// SPDX-License-Identifier: Apache-2.0
#include "distribute/collective_support.hpp"

#include <algorithm>
#include <memory>

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/distribute/communicator.hpp"
#include "tensorpool/graph/attributes.hpp"

namespace tp::distribute::detail {

Layout layout_of(const Node& node, std::size_t inputs) {
  const std::int64_t replicas = attribute_int(node, "replicas", static_cast<std::int64_t>(inputs));
  if (replicas <= 0 || inputs % static_cast<std::size_t>(replicas) != 0) {
    TP_THROW(InvalidArgument, "graph", node.op, " '", node.name, "': ", inputs, " inputs do not split into ", replicas,
             " replicas");
  }
  const std::int64_t shards = attribute_int(node, "shards", replicas);
  const std::int64_t first_shard = attribute_int(node, "first_shard", 0);
  if (first_shard < 0 || shards < first_shard + replicas) {
    TP_THROW(InvalidArgument, "graph", node.op, " '", node.name, "': local replicas ", first_shard, "..",
             first_shard + replicas - 1, " are not shards of ", shards);
  }
  return {static_cast<std::size_t>(replicas), inputs / static_cast<std::size_t>(replicas),
          static_cast<std::size_t>(shards), static_cast<std::size_t>(first_shard)};
}

std::int64_t elements_of(const TensorType& type) {
  std::int64_t elements = 1;
  for (std::int64_t dim : type.dims) elements = dim < 0 || elements < 0 ? -1 : elements * dim;
  return elements;
}

std::int64_t check_parameter_major(const InferenceContext& context, const Layout& layout, std::string_view op) {
  std::int64_t bucket = 0;
  for (std::size_t tensor = 0; tensor < layout.tensors; ++tensor) {
    const std::size_t first = tensor * layout.replicas;
    require_float_or_half(context, static_cast<int>(first), "tensor " + std::to_string(tensor));
    for (std::size_t replica = 1; replica < layout.replicas; ++replica) {
      if (context.inputs[first + replica] != context.inputs[first]) {
        TP_THROW(InvalidArgument, "graph", op, " '", context.node.name, "': tensor ", tensor, " of replica ", replica,
                 " is ", context.inputs[first + replica].to_string(), " but replica 0's is ",
                 context.inputs[first].to_string());
      }
    }
    if (context.inputs[first].dtype != context.inputs[0].dtype) {
      TP_THROW(InvalidArgument, "graph", op, " '", context.node.name, "': all tensors must share one dtype");
    }
    const std::int64_t elements = elements_of(context.inputs[first]);
    bucket = elements < 0 || bucket < 0 ? -1 : bucket + elements;
  }
  return bucket;
}

Tensor flat_range(const Tensor& tensor, std::int64_t begin, std::int64_t end) {
  return tensor.reshape(Shape{tensor.num_elements()}).slice(begin, end);
}

void copy_within(const Tensor& source, const Tensor& target) {
  device::Stream& stream = source.device().stream(0);
  device::copy(stream, source.buffer(), source.offset_bytes(), stream, target.buffer(), target.offset_bytes(),
               target.nbytes());
}

void pack_range(const std::vector<Tensor>& tensors, const Tensor& bucket, std::int64_t begin, std::int64_t end,
                bool pack) {
  std::int64_t offset = 0;
  for (const Tensor& tensor : tensors) {
    const std::int64_t elements = tensor.num_elements();
    const std::int64_t low = std::max(offset, begin);
    const std::int64_t high = std::min(offset + elements, end);
    if (low < high) {
      const Tensor part = flat_range(tensor, low - offset, high - offset);
      const Tensor slot = flat_range(bucket, low, high);
      pack ? copy_within(part, slot) : copy_within(slot, part);
    }
    offset += elements;
  }
}

namespace {

std::shared_ptr<distribute::Communicator> communicator_of(const Node& node) {
  return distribute::make_communicator(attribute_string(node, "algorithm", "ring"));
}

}  // namespace

Kernels collective_kernels(CollectiveKernel kernel) {
  return graph::every_backend([kernel](KernelContext& context) { kernel(*communicator_of(context.node), context); });
}

std::function<Kernel(const Node&, device::DeviceKind)> bind_communicator(CollectiveKernel kernel) {
  return [kernel](const Node& node, device::DeviceKind) -> Kernel {
    std::shared_ptr<distribute::Communicator> communicator = communicator_of(node);
    return [kernel, communicator](KernelContext& context) { kernel(*communicator, context); };
  };
}

}  // namespace tp::distribute::detail

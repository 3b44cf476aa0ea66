// SPDX-License-Identifier: Apache-2.0
// The collectives of sharded (ZeRO) training, over R local replicas' P tensors given parameter-major (input
// p * R + r is tensor p of replica r), packed into one flat bucket of N elements per replica that splits into
// K shards (distribute::Communicator::chunk: S = ceil(N / K) elements from k * S); local replica r owns shard
// first_shard + r. In one process K = R; across the workers of an mpirun job K = world size x R (Layout).
//
// ReduceScatter(g...) [replicas, algorithm, shards, first_shard]: outputs r (on replica r): float [S], the sum
//   over every replica of the job of replica r's shard of the gradients, zero-padded to S at the tail; then R
//   buckets [N] and R communicator scratch buffers (working space, planned like any tensor). Not differentiable.
//   With `unpack` = false the shard outputs are empty: the consumer reads its chunk of the bucket itself (the
//   sharded update does), which saves the shard's copy and memory while the bucket is alive anyway.
// AllGather(var...) [replicas, algorithm, shards, first_shard]: stateful; afterwards every replica's tensors
//   hold, in each shard k, what the replica owning k held there (each replica updated its shard; this spreads
//   the updates). Outputs: R buckets [N] (working space).
#include "distribute/collective_support.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/distribute/communicator.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "tensorpool/ops/init.hpp"

namespace tp::distribute::detail {

namespace {

std::vector<Tensor> replica_tensors(const KernelContext& context, const Layout& layout, std::size_t replica) {
  std::vector<Tensor> tensors;
  for (std::size_t tensor = 0; tensor < layout.tensors; ++tensor) {
    tensors.push_back(context.inputs[tensor * layout.replicas + replica]);
  }
  return tensors;
}

std::vector<TensorType> infer_reduce_scatter(const InferenceContext& context) {
  const Layout layout = layout_of(context.node, context.inputs.size());
  const std::int64_t bucket = check_parameter_major(context, layout, "ReduceScatter");
  const DType dtype = context.inputs[0].dtype;
  const auto communicator = distribute::make_communicator(attribute_string(context.node, "algorithm", "ring"));
  const auto shards = static_cast<std::int64_t>(layout.shards);
  const std::int64_t shard = bucket < 0 ? -1 : (bucket + shards - 1) / shards;
  const bool unpack = attribute_bool(context.node, "unpack", true);
  std::vector<TensorType> outputs;
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) outputs.push_back({dtype, {unpack ? shard : 0}});
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) outputs.push_back({dtype, {bucket}});
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    outputs.push_back({dtype, {bucket < 0 ? -1 : communicator->scratch_elements(bucket, layout.replicas, replica)}});
  }
  return outputs;
}

void reduce_scatter_kernel(distribute::Communicator& communicator, KernelContext& context) {
  const Layout layout = layout_of(context.node, context.inputs.size());
  std::vector<Tensor> buckets, scratch;
  std::vector<std::vector<Tensor>> parts;
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    buckets.push_back(context.outputs[layout.replicas + replica]);
    scratch.push_back(context.outputs[2 * layout.replicas + replica]);
    parts.push_back(replica_tensors(context, layout, replica));
  }
  communicator.reduce_scatter_parts(parts, buckets, scratch);
  if (!attribute_bool(context.node, "unpack", true)) return;
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    const Tensor& shard = context.outputs[replica];
    const auto [begin, end] =
        distribute::Communicator::chunk(buckets[replica].num_elements(), layout.shards, layout.first_shard + replica);
    if (begin < end) copy_within(flat_range(buckets[replica], begin, end), flat_range(shard, 0, end - begin));
    if (end - begin < shard.num_elements()) {
      tp::ops::fill(flat_range(shard, end - begin, shard.num_elements()), 0.0, {.stream = &shard.device().stream(0)});
    }
  }
}

std::vector<TensorType> infer_all_gather(const InferenceContext& context) {
  const Layout layout = layout_of(context.node, context.inputs.size());
  const std::int64_t bucket = check_parameter_major(context, layout, "AllGather");
  std::vector<TensorType> outputs;
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    outputs.push_back({context.inputs[0].dtype, {bucket}});
  }
  return outputs;
}

void all_gather_kernel(distribute::Communicator& communicator, KernelContext& context) {
  const Layout layout = layout_of(context.node, context.inputs.size());
  std::vector<Tensor> buckets;
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    buckets.push_back(context.outputs[replica]);
    const auto [begin, end] =
        distribute::Communicator::chunk(buckets.back().num_elements(), layout.shards, layout.first_shard + replica);
    pack_range(replica_tensors(context, layout, replica), buckets.back(), begin, end, true);
  }
  communicator.all_gather(buckets);
  for (std::size_t replica = 0; replica < layout.replicas; ++replica) {
    const std::int64_t elements = buckets[replica].num_elements();
    const auto [begin, end] = distribute::Communicator::chunk(elements, layout.shards, layout.first_shard + replica);
    const std::vector<Tensor> tensors = replica_tensors(context, layout, replica);
    pack_range(tensors, buckets[replica], 0, begin, false);
    pack_range(tensors, buckets[replica], end, elements, false);
  }
}

}  // namespace

void register_sharding_ops(OpRegistry& registry) {
  registry.add(OpDef{.name = "ReduceScatter",
                     .infer = infer_reduce_scatter,
                     .kernels = collective_kernels(reduce_scatter_kernel),
                     .bind_kernel = bind_communicator(reduce_scatter_kernel),
                     .collective = true});
  registry.add(OpDef{.name = "AllGather",
                     .infer = infer_all_gather,
                     .kernels = collective_kernels(all_gather_kernel),
                     .bind_kernel = bind_communicator(all_gather_kernel),
                     .stateful = true,
                     .collective = true});
}

}  // namespace tp::distribute::detail

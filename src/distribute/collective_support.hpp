// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the collective ops (AllReduce, ReduceScatter, AllGather) share: their inputs come parameter-major
// (input p * R + r is tensor p of replica r, so input i lives on replica i % R), and they pack a replica's
// tensors into one flat bucket so the communicator runs once per step.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/graph/op_definition.hpp"
#include "tensorpool/graph/op_registry.hpp"

namespace tp::distribute {
class Communicator;
}

namespace tp::distribute::detail {

using graph::InferenceContext;
using graph::Kernel;
using graph::KernelContext;
using graph::Kernels;
using graph::Node;
using graph::OpDef;
using graph::OpRegistry;
using graph::TensorType;

struct Layout {
  std::size_t replicas = 0;
  std::size_t tensors = 0;  // per replica
  // Sharding ops: the bucket splits into `shards` chunks (Communicator::chunk) over every replica of the job;
  // local replica r owns chunk first_shard + r. In one process shards = replicas and first_shard = 0; across
  // workers (the "mpi" algorithm) shards = world size x replicas and first_shard = rank x replicas.
  std::size_t shards = 0;
  std::size_t first_shard = 0;
};

// From the `replicas` attribute (default: one tensor per replica) and the optional `shards` and `first_shard`;
// throws naming the node when the inputs do not split evenly or the local replicas' shards exceed `shards`.
Layout layout_of(const Node& node, std::size_t inputs);

// Elements of a type; -1 when a dim is unknown.
std::int64_t elements_of(const TensorType& type);

// Every tensor p has one type over the replicas, all share one floating dtype; returns the bucket's
// element count (the sum over p; -1 when unknown). `op` names the op in messages.
std::int64_t check_parameter_major(const InferenceContext& context, const Layout& layout, std::string_view op);

// The elements [begin, end) of a tensor, as a flat view.
Tensor flat_range(const Tensor& tensor, std::int64_t begin, std::int64_t end);

// source -> target on one device, in its stream-0 order.
void copy_within(const Tensor& source, const Tensor& target);

// Copies the overlap of each of `tensors` (laid end to end from element 0) with [begin, end) between the
// tensors and `bucket` (whose element 0 is flat element 0): into the bucket when `pack`, else out of it.
void pack_range(const std::vector<Tensor>& tensors, const Tensor& bucket, std::int64_t begin, std::int64_t end,
                bool pack);

// A collective's kernel, run by the communicator its node's `algorithm` attribute names ("ring" by default).
using CollectiveKernel = void (*)(distribute::Communicator& communicator, KernelContext& context);
// OpDef::kernels of a collective, for every backend: each call makes the node's communicator.
Kernels collective_kernels(CollectiveKernel kernel);
// OpDef::bind_kernel of a collective: the node's communicator made once, when a step is prepared, and kept by
// the kernel the executor runs on every run (the transports keep nothing of one call for the next).
std::function<Kernel(const Node&, device::DeviceKind)> bind_communicator(CollectiveKernel kernel);

void register_all_reduce_op(OpRegistry& registry);       // AllReduce (all_reduce_op.cpp)
void register_sharding_ops(OpRegistry& registry);        // ReduceScatter, AllGather (sharding_ops.cpp)
void register_all_reduce_adam_op(OpRegistry& registry);  // AllReduceAdam (all_reduce_adam_op.cpp)

}  // namespace tp::distribute::detail

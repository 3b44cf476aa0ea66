// SPDX-License-Identifier: Apache-2.0
#pragma once
// The graph ops of the collectives: AllReduce (src/distribute/all_reduce_op.cpp), ReduceScatter and AllGather
// (sharding_ops.cpp), and AllReduceAdam (all_reduce_adam_op.cpp: the mirrored Adam update with the gradients'
// all-reduce folded in). They are distribute's, so the graph layer below does not register them: code that adds
// one of them to a graph calls register_collective_ops() first.

#include "tensorpool/graph/op_registry.hpp"

namespace tp::distribute {

// Adds the collectives to graph::OpRegistry::global(), once per process (thread-safe; later calls return at
// once), so that graph code built on the global registry (Graph, Session) knows them.
void register_collective_ops();

// Adds them to `registry`: throws tp::InvalidArgument when one of their names is already registered there.
void register_collective_ops(graph::OpRegistry& registry);

}  // namespace tp::distribute

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The update stage of a replicated model (one device, mirrored, multi-worker without ZeRO; the parameter
// server's own graph): the gradients summed over the replicas by AllReduce nodes (when there are several
// replicas, or a job of several workers: spec.all_reduce == mpi), per gradient dtype in buckets of at most
// spec.bucket_bytes filled from the last parameter back (the order the backward pass produces the gradients),
// then every replica applies the same optimizer update to its copy of the variables. A bucket of several
// gradients is not unpacked: the updates read their ranges of it (`slice`), so the step holds one copy of the
// reduced gradients. With loss scaling each replica's updates are the If forms gated on the product of
// AllFinite over its reduced gradients divided by the scale (every replica decides alike). Where the update
// folds (can_fuse_update), and for one replica computing in 16 bits with Adam on a cpu or sim device, it is one
// AllReduceAdam node that keeps persistent compute copies (persistent_compute_copies).

#include <string>
#include <vector>

#include "train/model_graph.hpp"

namespace tp::train {

// Adds the AllReduce buckets (if any) and the updates to `model`; appends each replica's optimizer state to
// model.variables and sets each replica's all_finite when loss scaling is on.
void add_replicated_updates(const ModelSpec& spec, const std::vector<std::string>& devices, const GradientStage& stage,
                            ModelGraph& model);

// Whether the replicas' Adam updates can read every replica's gradient in place (AllReduceAdam) instead of an
// all-reduced copy: asked for (spec.fuse_update), Adam without loss scaling, two or more replicas on distinct
// sim devices of this process (they reach each other's memory) summed by the in-process ring, and every
// gradient in its parameter's dtype or, for a float32 parameter, bfloat16 (mixed_bfloat16; float16 comes with
// loss scaling). Both update stages (this one and the sharded one) take it.
bool can_fuse_update(const ModelSpec& spec, const std::vector<std::string>& devices, const GradientStage& stage,
                     const graph::Graph& g);

// For the folded update (AllReduceAdam's compute_copies), when every gradient is 16-bit: each parameter's Cast
// to its layer's compute dtype ("dense/kernel/Cast", made each step) becomes, in place (same node, same
// consumers), a persistent Variable "<parameter>/<dtype>" (e.g. "replica_0/dense/kernel/bfloat16", kind
// parameter, initialised as the cast of its parameter) that the update keeps equal to the cast of the updated
// parameter; each pair is recorded in model.compute_copies. Returns the copies parameter-major (input p * R + r
// is parameter p's on replica r), or none (and changes nothing) unless every parameter has such a Cast.
std::vector<graph::Output> persistent_compute_copies(const GradientStage& stage, ModelGraph& model);

}  // namespace tp::train

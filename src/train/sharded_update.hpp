// SPDX-License-Identifier: Apache-2.0
#pragma once
// The ZeRO update of a mirrored or multi-worker model (Strategy::shard): parameters of a replica laid end to end
// form N elements; the job's R replicas (every worker's: ModelSpec::workers x local devices) split them into R
// chunks, replica k owning chunk k (distribute::Communicator::chunk: ceil(N / R) elements from k * ceil(N / R); a
// worker's local replica r is k = rank x devices + r) and keeping the optimizer state of that chunk only, as
// variables "shard_<k>/adam_m", "shard_<k>/adam_v" (or "shard_<k>/momentum") of ceil(N / R) elements (the last
// replica's tail is padding). So a checkpoint of two workers names its state as one of mirrored over two devices.
//   optimizer (ZeRO-1): AllReduce of the gradients as unsharded; each replica updates its chunk of its
//                       parameters from its reduced bucket; AllGather of the parameters.
//   gradients (ZeRO-2): ReduceScatter of the gradients: each replica receives only its chunk's sum (and reads it
//                       in its bucket: no separate copy); the same update and AllGather. Both collectives move
//                       half the data of an AllReduce.
// Memory: both modes hold 1/R of the optimizer state; in the step, the gradients and one bucket of N elements
// (the reduced gradients are read from the collective's bucket, never unpacked).
// Where can_fuse_update allows (ModelSpec::fuse_update, Adam on distinct sim devices of this process, the ring,
// no loss scaling, gradients in their parameters' dtype or bfloat16), both modes are one AllReduceAdam node with sharded slots instead: each
// replica reads its chunk of every replica's gradients in place, updates its chunk and stores the updated
// parameters into every other replica's; no bucket, no all-gather, bitwise the same variables and the same
// slot variables. Otherwise:
// Updates are ApplyAdam / ApplySgd nodes with a `slice` (one per parameter a chunk touches). The gradients
// travel in their dtype (16-bit under mixed precision) when every parameter's gradient has the same one, else
// each is cast to float32 (one flat space needs one dtype). With loss scaling the updates are the If forms,
// gated on every replica alike and unscaling by 1 / scale: ZeRO-1 on AllFinite over the reduced gradients (as
// unsharded); ZeRO-2 on the AllReduce of each replica's AllFinite over its chunk, which is R only when every
// chunk is finite.

#include <optional>
#include <string>
#include <vector>

#include "train/model_graph.hpp"

namespace tp::train {

// Adds the updates (and the AllGather, the last target) to `model`; appends each replica's optimizer-state
// variables to model.variables and sets each replica's all_finite when loss scaling is on (stage.loss_scale:
// the fed scale the gradients are multiplied by; nullopt without loss scaling).
void add_sharded_updates(const ModelSpec& spec, const std::vector<std::string>& devices, const GradientStage& stage,
                         ModelGraph& model);

}  // namespace tp::train

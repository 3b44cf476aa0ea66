// SPDX-License-Identifier: Apache-2.0
#pragma once
// The training graph of a Sequential model under a strategy, built in three stages:
//   build_forward:  per replica, the placeholders, the forward pass and the loss;
//   build_backward: the loss scaling and each replica's gradients;
//   the strategy's update stage (DistributionStrategy::add_update_stage): how the gradients meet
//   (add_replicated_updates: AllReduce buckets; add_sharded_updates: ZeRO) and the optimizer's updates.
// For each replica r (on devices[r]) the
// placeholders "replica_r/x" and "replica_r/labels", the forward pass over that replica's copy of the
// variables, its loss (the per-example losses summed and scaled by the fed "inv_global_batch", so the
// replicas' losses add up to the global mean), the number of correct predictions, the predictions, the
// gradients, then (mirrored) their AllReduce and the optimizer's update of every replica.
//
// Mixed precision (spec.policy, Dense::policy): each layer casts its input and its float32 variables to its
// compute dtype ("dense/Cast", "dense/kernel/Cast"), the output layer's values are cast back to float32
// ("dense_1/Cast_output") before softmax and the loss. Gradients are taken with respect to the compute copies,
// so a 16-bit layer's weight gradients are 16-bit, and are all-reduced (per gradient dtype, in buckets of at
// most bucket_bytes, filled from the last parameter back) and handed to the float32 update in 16 bits. With float16
// anywhere, the loss is multiplied by the fed "loss_scale" before differentiation; the gradients stay scaled and the
// updates are ApplyAdamIf / ApplySgdIf whose factor is the product of AllFinite over the (reduced) gradients divided by
// the scale
// ("loss_scale/update_factor"): 0 skips the step, else the update unscales as it reads.
//
// Invariants: every replica's variables are listed in the same order in `variables[r]`, with identical
// initialisers, so replicas start and stay bitwise equal; one device means one replica and no AllReduce.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensorpool/graph/graph.hpp"
#include "tensorpool/train/distribution_strategy.hpp"
#include "tensorpool/train/layers.hpp"
#include "tensorpool/train/loss_scale.hpp"
#include "tensorpool/train/strategy.hpp"

namespace tp::train {

struct ModelSpec {
  std::vector<std::int64_t> input_shape;  // one example's shape, e.g. {784} or {28, 28} (flattened)
  std::vector<Dense> layers;
  Optimizer optimizer = Adam{};
  Loss loss = Loss::sparse_categorical_crossentropy;
  bool from_logits = false;
  AllReduce all_reduce = AllReduce::ring;
  std::int64_t bucket_bytes = Strategy::kDefaultBucketBytes;  // the AllReduce buckets' size limit (Strategy)
  Shard shard = Shard::none;         // ZeRO (train/sharded_update.hpp); mirrored or multi-worker, >= 2 replicas in all
  bool fuse_update = false;          // mirrored Adam on sim devices: the all-reduce folded into the update (Strategy)
  bool multi_tensor_update = false;  // one ApplyAdamMulti / ApplySgdMulti per device (Strategy)
  // A multi-worker job's MPI world: ZeRO shards span every worker's replicas (rank r's replicas own shards
  // r x devices.. r x devices + devices - 1).
  std::int64_t workers = 1;
  std::int64_t rank = 0;
  std::uint64_t seed = 0;
  DTypePolicy policy{};           // the model's; a layer's own policy overrides it
  LossScaleOptions loss_scale{};  // used when some layer computes in float16
};

struct ReplicaNodes {
  std::string x, labels, loss, correct, predictions;
  std::vector<std::string> gradients{};  // per parameter: its gradient in the layer's compute dtype, before any
                                         // AllReduce (times the loss scale when loss scaling is on)
  std::string all_finite{};              // loss scaling: 1 when every (reduced) gradient is finite, else 0
};

struct ModelGraph {
  graph::Graph graph;
  std::vector<ReplicaNodes> replicas;
  std::vector<std::string> updates;                 // optimizer update nodes (run as targets)
  std::vector<std::vector<std::string>> variables;  // per replica: parameters then optimizer slots
  std::string inv_global_batch = "inv_global_batch";
  std::string loss_scale{};        // loss scaling: the float32 scalar placeholder of the scale; empty without it
  DType input_dtype = DType::f32;  // of the "x" placeholders: the first layer's compute dtype
  bool has_accuracy = false;
  Shard shard = Shard::none;  // the update stage's ZeRO mode as built (ModelSpec::shard, automatic settled)
  // The persistent compute copies (persistent_compute_copies, replicated_update.hpp), each with its float32
  // parameter: {"replica_0/dense/kernel/bfloat16", "replica_0/dense/kernel"}. The update keeps each equal to the
  // cast of its parameter; whoever writes a parameter otherwise (a restore) must refresh its copy.
  std::vector<std::pair<std::string, std::string>> compute_copies{};
};

// What the forward stage leaves for the backward one, per replica: its parameters (variables), the copies the
// layers compute with (the variable, or its Cast to the layer's 16-bit dtype) and its loss.
struct ForwardStage {
  std::vector<std::vector<graph::Output>> parameters;      // [replica][parameter]
  std::vector<std::vector<graph::Output>> compute_copies;  // [replica][parameter]
  std::vector<graph::Output> losses;                       // [replica]
};

// What the backward stage leaves for the strategy's update stage.
struct GradientStage {
  std::vector<std::vector<graph::Output>> parameters;                // [replica][parameter]
  std::vector<std::vector<std::optional<graph::Output>>> gradients;  // [replica][parameter], of the compute copies
  std::optional<graph::Output> loss_scale;  // the fed scale the gradients are multiplied by; none without scaling
};

// The placeholders, the forward pass and the loss of every replica (model.replicas), on devices[r].
ForwardStage build_forward(const ModelSpec& spec, const std::vector<std::string>& devices, ModelGraph& model);
// The loss-scale placeholder (when some layer computes in float16), each replica's gradients and the
// replicas' parameters listed in model.variables.
GradientStage build_backward(const ModelSpec& spec, const std::vector<std::string>& devices,
                             const ForwardStage& forward, ModelGraph& model);

// Throws tp::InvalidArgument naming the bad layer or setting. `strategy` adds the update stage.
ModelGraph build_model_graph(const ModelSpec& spec, const std::vector<std::string>& devices,
                             const DistributionStrategy& strategy);
// The mirrored strategy's graph (one replica per device; ZeRO when spec.shard is set).
ModelGraph build_model_graph(const ModelSpec& spec, const std::vector<std::string>& devices);

struct CompileOptions;  // tensorpool/train/sequential.hpp
// The spec Sequential::compile builds: the model's layers and compile options, the strategy's collective
// settings (all_reduce, bucket_bytes, shard).
ModelSpec model_spec(const std::vector<std::int64_t>& input_shape, const std::vector<Dense>& layers,
                     const CompileOptions& options, const Strategy& strategy);

}  // namespace tp::train

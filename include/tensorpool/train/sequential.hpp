// SPDX-License-Identifier: Apache-2.0
#pragma once
// Sequential: a Keras-like model. Layers are added, compile() fixes the optimizer, loss and strategy and
// builds the training graph (model_graph), and a Session (with the static memory planner) runs it.
//
//   tp::train::Sequential model({784}, {{.units = 512, .activation = Activation::relu},
//                                       {.units = 10, .activation = Activation::softmax}});
//   model.compile({.optimizer = Adam{}, .loss = Loss::sparse_categorical_crossentropy},
//                 Strategy::mirrored({"sim:0", "sim:1"}));
//   History history = model.fit(train, {.epochs = 5, .batch_size = 32, .validation = &test});
//
// A step feeds each replica its rows of the global batch (rows split as evenly as possible), runs the
// forward and backward passes and the updates, and returns the global mean loss and the correct count.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/runtime/memory_plan.hpp"
#include "tensorpool/runtime/session.hpp"
#include "tensorpool/runtime/session_options.hpp"
#include "tensorpool/train/layers.hpp"
#include "tensorpool/train/loss_scale.hpp"
#include "tensorpool/train/pending_step.hpp"
#include "tensorpool/train/plan_bytes.hpp"
#include "tensorpool/train/strategy.hpp"

namespace tp::train {

class DistributionStrategy;

struct CompileOptions {
  Optimizer optimizer = Adam{};
  Loss loss = Loss::sparse_categorical_crossentropy;
  bool from_logits = false;
  std::uint64_t seed = 42;        // initialisers (identical on every replica)
  DTypePolicy policy{};           // float32, mixed_float16 or mixed_bfloat16 (a Dense layer's own policy wins)
  LossScaleOptions loss_scale{};  // dynamic loss scaling, used when some layer computes in float16
};

struct StepResult {
  double loss = 0;     // mean over the batch
  double correct = 0;  // examples whose argmax matched (classification)
  std::int64_t examples = 0;
};

class Sequential {
 public:
  explicit Sequential(std::vector<std::int64_t> input_shape, std::vector<Dense> layers = {});
  ~Sequential();
  Sequential(const Sequential&) = delete;
  Sequential& operator=(const Sequential&) = delete;

  // Before compile() only; throws tp::InvalidArgument afterwards.
  void add(Dense layer);
  // Builds the graph and the session. The strategy's devices must exist in the session's device manager.
  void compile(const CompileOptions& options, const Strategy& strategy = {}, runtime::SessionOptions session = {});

  // Under the parameter-server strategy the model is compiled on the server's device (it holds the variables
  // between runs, evaluates and predicts) and trains with fit() / fit_parameter_server(); train_step throws.
  // One training step on a global batch: features [B, ...input_shape] float32 and labels [B] int32 (or
  // [B, units] float32 for mean squared error), on any device. `step` counts from 1. With loss scaling a step
  // whose gradients overflow updates nothing (see loss_scale.hpp) and Adam's step counter skips it.
  StepResult train_step(const Tensor& features, const Tensor& labels, std::int64_t step);
  // The same step launched without waiting for it (pending_step.hpp): fit() keeps FitOptions::steps_in_flight
  // of them launched. The batch's tensors are read in place until the step is waited for. Throws
  // tp::InvalidArgument under loss scaling (a step's loss scale follows from the previous step's gradients)
  // and under the parameter-server and multi-worker strategies.
  PendingStep launch_train_step(const Tensor& features, const Tensor& labels, std::int64_t step);
  // The loss and correct count without updating anything.
  StepResult test_step(const Tensor& features, const Tensor& labels);
  // The output layer's values for a batch, on cpu:0, [B, units].
  Tensor predict_step(const Tensor& features);

  // The memory plan of a training step at `batch_size`, per device, before running it. `batches_on`: the
  // device the batches will live on (Dataset::stage_on; empty: the host). A replica on that device, when it is
  // not host-accessible (opencl with shared memory), reads its features and labels in place, with no slot in
  // its arena (Session::plan's fed_on), as its steps then do.
  runtime::MemoryPlan plan(std::int64_t batch_size, std::string_view batches_on = {});
  // That plan's arena on `device` split into activations, activation gradients, weight gradients and the
  // rest (plan_bytes.hpp): what mixed precision halves.
  StepBytes step_bytes(const runtime::MemoryPlan& plan, std::string_view device) const;
  // Replica 0's variables ("dense/kernel", "dense/kernel/adam_m", ...), copied to cpu:0, and assignment of
  // every replica from such a list (checkpoint restore). With loss scaling the list ends with its state:
  // "loss_scale/current" (float32 []), "loss_scale/good_steps" and "loss_scale/skipped_steps" (int64 []).
  // Sharded optimizer state comes from every shard ("shard_<k>/adam_m", ...): under the multi-worker strategy
  // with ZeRO each worker holds only its own, so variables() gathers them over MPI and every worker must call
  // it at the same point (fit() does, at each checkpoint); assign_variables() takes each worker's own.
  std::vector<std::pair<std::string, Tensor>> variables();
  void assign_variables(const std::vector<std::pair<std::string, Tensor>>& values);
  // Multi-worker: every worker takes rank `root`'s replicated variables (the parameters and unsharded optimizer
  // state; ZeRO shards are each worker's own), as Horovod's broadcast of the global variables, so the workers
  // start alike whatever their seeds. Collective (fit() calls it on every worker before the first step); a no-op
  // with one worker. tp::InvalidArgument for a root outside the job.
  void broadcast_variables(int root = 0);

  // The loss-scale state; empty when no layer computes in float16 (or before compile()).
  std::optional<LossScaleState> loss_scale_state() const;

  // What compile() was given (the parameter-server workers rebuild the model's graph on their devices).
  const std::vector<std::int64_t>& input_shape() const noexcept { return input_shape_; }
  const std::vector<Dense>& layers() const noexcept { return layers_; }
  const CompileOptions& compile_options() const;
  const Strategy& strategy() const;
  // The ZeRO mode the compiled update uses: the strategy's, with Shard::automatic settled.
  Shard shard() const;
  // The strategy's implementation (train/distribution_strategy.hpp): what fit() and the tools ask it.
  const DistributionStrategy& distribution() const;

  const std::vector<std::string>& devices() const noexcept { return devices_; }
  std::size_t replicas() const noexcept { return devices_.size(); }
  runtime::Session& session();
  bool has_accuracy() const;

 private:
  struct Compiled;
  runtime::FeedMap feeds(const Tensor& features, const Tensor* labels) const;
  std::vector<std::string> loss_and_correct_fetches() const;
  friend class PendingStep;
  StepResult collect(const std::vector<Tensor>& fetched, std::int64_t examples) const;

  std::vector<std::int64_t> input_shape_;
  std::vector<Dense> layers_;
  std::vector<std::string> devices_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace tp::train

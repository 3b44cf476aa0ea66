// SPDX-License-Identifier: Apache-2.0
// The training-like generators: training, varying_shape and growing_batch, all driven by TrainingSimulation.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "memory/trace_synthesis.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/trace_generators.hpp"

namespace tp::memory {
namespace trace_synthesis {
namespace {

// One model and its optimizer, trained step by step into a TraceBuilder.
class TrainingSimulation {
 public:
  TrainingSimulation(TraceBuilder& builder, const ModelOptions& model)
      : builder_(builder), model_(model), parameter_bytes_(parameter_bytes(model)) {
    if (model.layers == 0 || model.hidden == 0 || model.heads == 0 || model.vocabulary == 0) {
      TP_THROW(InvalidArgument, "trace", "model options need layers, hidden, heads and vocabulary > 0");
    }
    for (std::size_t bytes : parameter_bytes_) parameters_.push_back(builder_.allocate(bytes));
  }

  Batch load(std::size_t batch, std::size_t sequence) {
    const std::size_t tokens = batch * sequence;
    return Batch{builder_.allocate(tokens * kIndexBytes, kLoaderThread),
                 builder_.allocate(tokens * kIndexBytes, kLoaderThread)};
  }

  // Trains one step on `current`; the loader prefetches `next` (batch, sequence) while it runs, if given.
  Batch step(const Batch& current, std::size_t batch, std::size_t sequence, std::pair<std::size_t, std::size_t> next) {
    Batch prefetched;
    if (next.first != 0) prefetched = load(next.first, next.second);
    forward(batch, sequence);
    backward(batch, sequence);
    optimize();
    builder_.free(current.ids);
    builder_.free(current.labels);
    builder_.pause(50'000);
    return prefetched;
  }

 private:
  // Saved activations of one layer, in the order the forward pass produces them.
  enum Saved : std::size_t {
    kInput,
    kLn1,
    kQkv,
    kScores,
    kProbs,
    kAttention,
    kProjection,
    kMid,
    kLn2,
    kFc1,
    kGelu,
    kSavedCount
  };

  void forward(std::size_t batch, std::size_t sequence) {
    const std::size_t tokens = batch * sequence;
    const std::size_t h = model_.hidden;
    const std::size_t row = tokens * h * kFloatBytes;
    const std::size_t scores = batch * model_.heads * sequence * sequence * kFloatBytes;
    saved_.assign(model_.layers, std::vector<std::size_t>(kSavedCount, 0));
    std::size_t x = builder_.allocate(row);  // embedding output
    for (std::size_t layer = 0; layer < model_.layers; ++layer) {
      std::vector<std::size_t>& saved = saved_[layer];
      saved[kInput] = x;
      saved[kLn1] = builder_.allocate(row);
      saved[kQkv] = builder_.allocate(3 * row);
      const std::size_t workspace = builder_.allocate(row);  // matmul workspace
      builder_.free(workspace);
      saved[kScores] = builder_.allocate(scores);
      saved[kProbs] = builder_.allocate(scores);
      saved[kAttention] = builder_.allocate(row);
      saved[kProjection] = builder_.allocate(row);
      saved[kMid] = builder_.allocate(row);
      saved[kLn2] = builder_.allocate(row);
      saved[kFc1] = builder_.allocate(4 * row);
      saved[kGelu] = builder_.allocate(4 * row);
      x = builder_.allocate(row);  // fc2 + residual: the next layer's input
    }
    last_output_ = x;
    final_norm_ = builder_.allocate(row);
    logits_ = builder_.allocate(tokens * model_.vocabulary * kFloatBytes);
    loss_ = builder_.allocate(kFloatBytes);
  }

  void gradient(std::size_t parameter) { gradients_.push_back(builder_.allocate(parameter_bytes_[parameter])); }

  void backward(std::size_t batch, std::size_t sequence) {
    const std::size_t tokens = batch * sequence;
    const std::size_t row = tokens * model_.hidden * kFloatBytes;
    const std::size_t scores = batch * model_.heads * sequence * sequence * kFloatBytes;
    gradients_.clear();
    const std::size_t head = parameter_bytes_.size() - 1;
    const std::size_t d_logits = builder_.allocate(tokens * model_.vocabulary * kFloatBytes);
    builder_.free(loss_);
    builder_.free(logits_);
    gradient(head);
    const std::size_t d_norm = builder_.allocate(row);
    builder_.free(d_logits);
    builder_.free(final_norm_);
    gradient(head - 2);
    gradient(head - 1);
    std::size_t dy = builder_.allocate(row);
    builder_.free(d_norm);
    builder_.free(last_output_);
    for (std::size_t layer = model_.layers; layer-- > 0;) {
      std::vector<std::size_t>& saved = saved_[layer];
      const std::size_t d_gelu = builder_.allocate(4 * row);
      gradient(layer_parameter(layer, kFc2Weight));
      gradient(layer_parameter(layer, kFc2Bias));
      builder_.free(saved[kGelu]);
      const std::size_t d_fc1 = builder_.allocate(4 * row);
      builder_.free(d_gelu);
      builder_.free(saved[kFc1]);
      gradient(layer_parameter(layer, kFc1Weight));
      gradient(layer_parameter(layer, kFc1Bias));
      const std::size_t d_ln2 = builder_.allocate(row);
      builder_.free(d_fc1);
      builder_.free(saved[kLn2]);
      gradient(layer_parameter(layer, kLn2Weight));
      gradient(layer_parameter(layer, kLn2Bias));
      const std::size_t d_mid = builder_.allocate(row);
      builder_.free(d_ln2);
      builder_.free(saved[kMid]);
      builder_.free(dy);
      const std::size_t d_attention = builder_.allocate(row);
      builder_.free(saved[kProjection]);
      gradient(layer_parameter(layer, kProjWeight));
      gradient(layer_parameter(layer, kProjBias));
      builder_.free(saved[kAttention]);
      const std::size_t d_probs = builder_.allocate(scores);
      builder_.free(d_attention);
      const std::size_t d_scores = builder_.allocate(scores);
      builder_.free(d_probs);
      builder_.free(saved[kProbs]);
      builder_.free(saved[kScores]);
      const std::size_t d_qkv = builder_.allocate(3 * row);
      builder_.free(d_scores);
      builder_.free(saved[kQkv]);
      gradient(layer_parameter(layer, kQkvWeight));
      gradient(layer_parameter(layer, kQkvBias));
      const std::size_t d_ln1 = builder_.allocate(row);
      builder_.free(d_qkv);
      builder_.free(saved[kLn1]);
      gradient(layer_parameter(layer, kLn1Weight));
      gradient(layer_parameter(layer, kLn1Bias));
      dy = builder_.allocate(row);
      builder_.free(d_ln1);
      builder_.free(d_mid);
      builder_.free(saved[kInput]);
    }
    gradient(kTokenEmbedding);
    gradient(kPositionEmbedding);
    builder_.free(dy);
  }

  // Adam: the two moment buffers per parameter appear on the first update (as in PyTorch), each update
  // uses one temporary of the parameter's size, then gradients are freed (zero_grad(set_to_none=True)).
  void optimize() {
    if (moments_.empty()) {
      for (std::size_t bytes : parameter_bytes_) {
        moments_.push_back(builder_.allocate(bytes));
        moments_.push_back(builder_.allocate(bytes));
      }
    }
    for (std::size_t bytes : parameter_bytes_) builder_.free(builder_.allocate(bytes));
    for (std::size_t handle : gradients_) builder_.free(handle);
    gradients_.clear();
  }

  TraceBuilder& builder_;
  const ModelOptions model_;
  const std::vector<std::size_t> parameter_bytes_;
  std::vector<std::size_t> parameters_;  // persistent: never freed
  std::vector<std::size_t> moments_;     // persistent once created
  std::vector<std::size_t> gradients_;
  std::vector<std::vector<std::size_t>> saved_;
  std::size_t last_output_ = 0;
  std::size_t final_norm_ = 0;
  std::size_t logits_ = 0;
  std::size_t loss_ = 0;
};

void check_shape(std::size_t batch, std::size_t sequence, const ModelOptions& model) {
  if (batch == 0 || sequence == 0 || sequence > model.max_sequence) {
    TP_THROW(InvalidArgument, "trace", "batch ", batch, " x sequence ", sequence,
             " is not a valid shape; both must be > 0 and sequence <= max_sequence ", model.max_sequence);
  }
}

}  // namespace
}  // namespace trace_synthesis

using trace_synthesis::Batch;
using trace_synthesis::check_shape;
using trace_synthesis::Rng;
using trace_synthesis::TraceBuilder;
using trace_synthesis::TrainingSimulation;

Trace generate_training_trace(const TrainingTraceOptions& options) {
  check_shape(options.batch, options.sequence, options.model);
  Rng rng(options.seed);
  TraceBuilder builder(rng);
  TrainingSimulation simulation(builder, options.model);
  Batch batch = simulation.load(options.batch, options.sequence);
  for (std::size_t step = 0; step < options.steps; ++step) {
    const bool last = step + 1 == options.steps;
    batch = simulation.step(batch, options.batch, options.sequence,
                            last ? std::pair<std::size_t, std::size_t>{0, 0}
                                 : std::pair<std::size_t, std::size_t>{options.batch, options.sequence});
  }
  return builder.finish("training(seed=" + std::to_string(options.seed) + ")");
}

Trace generate_varying_shape_trace(const VaryingShapeTraceOptions& options) {
  if (options.min_batch == 0 || options.min_batch > options.max_batch || options.min_sequence == 0 ||
      options.min_sequence > options.max_sequence || options.min_batch * options.min_sequence > options.max_tokens) {
    TP_THROW(InvalidArgument, "trace", "varying-shape options need 0 < min <= max for batch and sequence and ",
             "min_batch * min_sequence <= max_tokens");
  }
  check_shape(options.max_batch, options.max_sequence, options.model);
  Rng rng(options.seed);
  auto draw = [&] {
    while (true) {
      const std::size_t batch = rng.between(options.min_batch, options.max_batch);
      const std::size_t sequence = rng.between(options.min_sequence, options.max_sequence);
      if (batch * sequence <= options.max_tokens) return std::pair{batch, sequence};
    }
  };
  TraceBuilder builder(rng);
  TrainingSimulation simulation(builder, options.model);
  std::pair<std::size_t, std::size_t> shape = draw();
  Batch batch = simulation.load(shape.first, shape.second);
  for (std::size_t step = 0; step < options.steps; ++step) {
    const bool last = step + 1 == options.steps;
    const std::pair<std::size_t, std::size_t> next = last ? std::pair<std::size_t, std::size_t>{0, 0} : draw();
    batch = simulation.step(batch, shape.first, shape.second, next);
    shape = next;
  }
  return builder.finish("varying_shape(seed=" + std::to_string(options.seed) + ")");
}

std::size_t growing_batch_at(const GrowingBatchTraceOptions& options, std::size_t step) noexcept {
  std::size_t batch = options.initial_batch;
  for (std::size_t doublings = step / std::max<std::size_t>(options.steps_per_doubling, 1);
       doublings > 0 && batch < options.max_batch; --doublings) {
    batch *= 2;
  }
  return std::min(batch, options.max_batch);
}

Trace generate_growing_batch_trace(const GrowingBatchTraceOptions& options) {
  if (options.initial_batch == 0 || options.initial_batch > options.max_batch || options.steps_per_doubling == 0) {
    TP_THROW(InvalidArgument, "trace", "growing-batch options need 0 < initial_batch <= max_batch and ",
             "steps_per_doubling > 0 (got ", options.initial_batch, ", ", options.max_batch, ", ",
             options.steps_per_doubling, ")");
  }
  check_shape(options.max_batch, options.sequence, options.model);
  Rng rng(options.seed);
  TraceBuilder builder(rng);
  TrainingSimulation simulation(builder, options.model);
  Batch batch = simulation.load(growing_batch_at(options, 0), options.sequence);
  for (std::size_t step = 0; step < options.steps; ++step) {
    const bool last = step + 1 == options.steps;
    const std::pair<std::size_t, std::size_t> next =
        last ? std::pair<std::size_t, std::size_t>{0, 0}
             : std::pair<std::size_t, std::size_t>{growing_batch_at(options, step + 1), options.sequence};
    batch = simulation.step(batch, growing_batch_at(options, step), options.sequence, next);
  }
  return builder.finish("growing_batch(seed=" + std::to_string(options.seed) + ")");
}

}  // namespace tp::memory

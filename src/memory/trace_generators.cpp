// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/trace_generators.hpp"

#include <algorithm>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/memory_resource.hpp"

namespace tp::memory {
namespace {

constexpr std::size_t kFloatBytes = 4;
constexpr std::size_t kIndexBytes = 8;
constexpr std::uintptr_t kFirstAddress = 0x7f0000000000;
constexpr std::uint64_t kMainThread = 0;
constexpr std::uint64_t kLoaderThread = 1;

// splitmix64: tiny, fast, and the same sequence on every platform and standard library.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [low, high] (modulo bias is negligible for the ranges used here).
  std::size_t between(std::size_t low, std::size_t high) noexcept {
    return low + static_cast<std::size_t>(next() % (static_cast<std::uint64_t>(high - low) + 1));
  }
  bool chance(double probability) noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53 < probability; }

 private:
  std::uint64_t state_;
};

// Appends events with synthetic pointers and times. Handles are event indices of allocations.
class TraceBuilder {
 public:
  explicit TraceBuilder(Rng& rng) : rng_(rng) {}

  std::size_t allocate(std::size_t bytes, std::uint64_t thread = kMainThread) {
    tick();
    events_.push_back(TraceEvent{thread, time_ns_, TraceAction::allocate, next_address_, bytes, 0});
    next_address_ += round_up(bytes, kDefaultAlignment);
    return events_.size() - 1;
  }
  void free(std::size_t handle, std::uint64_t thread = kMainThread) {
    tick();
    const TraceEvent& allocation = events_[handle];
    events_.push_back(TraceEvent{thread, time_ns_, TraceAction::free, allocation.pointer, allocation.size, 0});
  }
  void pause(std::int64_t nanoseconds) noexcept { time_ns_ += nanoseconds; }
  Trace finish(std::string source) { return Trace(std::move(source), std::move(events_)); }

 private:
  void tick() noexcept { time_ns_ += static_cast<std::int64_t>(100 + rng_.between(0, 900)); }

  Rng& rng_;
  std::vector<TraceEvent> events_;
  std::uintptr_t next_address_ = kFirstAddress;
  std::int64_t time_ns_ = 0;
};

// Parameter layout: token embedding, position embedding, then per layer kLayerParameters tensors in the
// order of kLayer* below, then the final layer norm (weight, bias) and the output head.
enum LayerParameter : std::size_t {
  kLn1Weight,
  kLn1Bias,
  kQkvWeight,
  kQkvBias,
  kProjWeight,
  kProjBias,
  kLn2Weight,
  kLn2Bias,
  kFc1Weight,
  kFc1Bias,
  kFc2Weight,
  kFc2Bias,
  kLayerParameters
};
constexpr std::size_t kTokenEmbedding = 0;
constexpr std::size_t kPositionEmbedding = 1;
constexpr std::size_t kFirstLayerParameter = 2;

std::size_t layer_parameter(std::size_t layer, LayerParameter which) {
  return kFirstLayerParameter + layer * kLayerParameters + which;
}

std::vector<std::size_t> parameter_bytes(const ModelOptions& model) {
  const std::size_t h = model.hidden;
  const std::size_t f = 4 * h;
  std::vector<std::size_t> elements{model.vocabulary * h, model.max_sequence * h};
  for (std::size_t layer = 0; layer < model.layers; ++layer) {
    elements.insert(elements.end(), {h, h, h * 3 * h, 3 * h, h * h, h, h, h, h * f, f, f * h, h});
  }
  elements.insert(elements.end(), {h, h, h * model.vocabulary});
  for (std::size_t& count : elements) count *= kFloatBytes;
  return elements;
}

struct Batch {
  std::size_t ids = 0;
  std::size_t labels = 0;
};

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

// A decoder-only model serving requests into a TraceBuilder: weights first, then prefills, decode steps and
// KV caches as generate_llm_serving_trace describes. Inference keeps no activation past the layer that reads
// it, so each layer allocates its outputs and frees its inputs.
class ServingSimulation {
 public:
  ServingSimulation(TraceBuilder& builder, Rng& rng, const LlmServingTraceOptions& options)
      : builder_(builder), rng_(rng), options_(options) {
    for (std::size_t bytes : parameter_bytes(options.model)) builder_.allocate(bytes);  // live to the end
  }

  void run() {
    std::size_t admitted = 0;
    while (admitted < options_.requests || !running_.empty()) {
      // Arrivals: one request when none runs, then more while a coin says so and there is room.
      while (admitted < options_.requests && running_.size() < options_.max_concurrent &&
             (running_.empty() || rng_.chance(0.5))) {
        prefill(admitted++);
      }
      decode();
      builder_.pause(20'000);
    }
  }

 private:
  struct Request {
    std::uint64_t thread = 0;
    std::size_t ids = 0;           // prompt token ids, live while the request runs
    std::size_t cache = 0;         // the KV cache
    std::size_t cache_tokens = 0;  // its capacity
    std::size_t length = 0;        // tokens in the cache
    std::size_t to_generate = 0;   // tokens still to generate
  };

  std::size_t cache_bytes(std::size_t tokens) const {
    return 2 * options_.model.layers * tokens * options_.model.hidden * kFloatBytes;
  }
  std::size_t blocks_for(std::size_t tokens) const {
    return (tokens + options_.kv_block_tokens - 1) / options_.kv_block_tokens * options_.kv_block_tokens;
  }

  // The layers over `tokens` rows whose attention scores take `score_bytes`, then the logits of `logit_rows`
  // rows and the sampled tokens.
  void layers(std::size_t tokens, std::size_t score_bytes, std::size_t logit_rows, std::uint64_t thread) {
    const std::size_t row = tokens * options_.model.hidden * kFloatBytes;
    std::size_t x = builder_.allocate(row, thread);
    for (std::size_t layer = 0; layer < options_.model.layers; ++layer) {
      const std::size_t qkv = builder_.allocate(3 * row, thread);
      const std::size_t scores = builder_.allocate(score_bytes, thread);
      builder_.free(qkv, thread);
      const std::size_t mlp = builder_.allocate(4 * row, thread);
      builder_.free(scores, thread);
      const std::size_t y = builder_.allocate(row, thread);
      builder_.free(mlp, thread);
      builder_.free(x, thread);
      x = y;
    }
    const std::size_t logits = builder_.allocate(logit_rows * options_.model.vocabulary * kFloatBytes, thread);
    builder_.free(x, thread);
    const std::size_t sampled = builder_.allocate(logit_rows * kIndexBytes, thread);
    builder_.free(logits, thread);
    builder_.free(sampled, thread);
  }

  void prefill(std::size_t index) {
    Request request;
    request.thread = index % options_.threads;
    const std::size_t prompt = rng_.between(options_.min_prompt, options_.max_prompt);
    request.to_generate = rng_.between(options_.min_generated, options_.max_generated);
    request.ids = builder_.allocate(prompt * kIndexBytes, request.thread);
    request.cache_tokens = blocks_for(prompt + 1);
    request.cache = builder_.allocate(cache_bytes(request.cache_tokens), request.thread);
    request.length = prompt;
    layers(prompt, options_.model.heads * prompt * prompt * kFloatBytes, 1, request.thread);
    running_.push_back(request);
  }

  // One token for every running request: the batch's activations (scores padded to the longest request),
  // then each cache takes the token, growing by a block when full; finished requests free theirs.
  void decode() {
    std::size_t longest = 0;
    for (const Request& request : running_) longest = std::max(longest, request.length + 1);
    const std::size_t batch = running_.size();
    layers(batch, batch * options_.model.heads * longest * kFloatBytes, batch, kMainThread);
    std::vector<Request> still_running;
    for (Request& request : running_) {
      ++request.length;
      --request.to_generate;
      if (request.to_generate == 0) {
        builder_.free(request.cache, request.thread);
        builder_.free(request.ids, request.thread);
        continue;
      }
      if (request.length == request.cache_tokens) {
        request.cache_tokens += options_.kv_block_tokens;
        const std::size_t grown = builder_.allocate(cache_bytes(request.cache_tokens), request.thread);
        builder_.free(request.cache, request.thread);
        request.cache = grown;
      }
      still_running.push_back(request);
    }
    running_ = std::move(still_running);
  }

  TraceBuilder& builder_;
  Rng& rng_;
  const LlmServingTraceOptions options_;
  std::vector<Request> running_;
};

}  // namespace

Trace generate_random_trace(const RandomTraceOptions& options) {
  if (options.min_bytes == 0 || options.min_bytes > options.max_bytes || options.max_bytes > options.max_live_bytes ||
      options.threads == 0) {
    TP_THROW(InvalidArgument, "trace", "random trace options need 0 < min_bytes <= max_bytes <= max_live_bytes and ",
             "threads > 0 (got ", options.min_bytes, ", ", options.max_bytes, ", ", options.max_live_bytes, ", ",
             options.threads, ")");
  }
  Rng rng(options.seed);
  TraceBuilder builder(rng);
  std::vector<std::size_t> live;
  std::size_t live_bytes = 0;
  auto free_one = [&](std::size_t position, std::uint64_t thread) {
    const std::size_t handle = live[position];
    live[position] = live.back();
    live.pop_back();
    builder.free(handle, thread);
    return handle;
  };
  std::vector<std::size_t> size_of;
  for (std::size_t step = 0; step < options.steps; ++step) {
    const std::uint64_t thread = rng.between(0, options.threads - 1);
    const std::size_t bytes = rng.between(options.min_bytes, options.max_bytes);
    const bool allocate = live.empty() || rng.chance(options.allocate_probability);
    if (allocate && live_bytes + bytes <= options.max_live_bytes) {
      const std::size_t handle = builder.allocate(bytes, thread);
      if (size_of.size() <= handle) size_of.resize(handle + 1, 0);
      size_of[handle] = bytes;
      live.push_back(handle);
      live_bytes += bytes;
    } else {
      live_bytes -= size_of[free_one(rng.between(0, live.size() - 1), thread)];
    }
  }
  while (!live.empty()) free_one(live.size() - 1, rng.between(0, options.threads - 1));
  return builder.finish("random(seed=" + std::to_string(options.seed) + ")");
}

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

Trace generate_llm_serving_trace(const LlmServingTraceOptions& options) {
  if (options.requests == 0 || options.max_concurrent == 0 || options.threads == 0 || options.kv_block_tokens == 0 ||
      options.min_prompt == 0 || options.min_prompt > options.max_prompt || options.min_generated == 0 ||
      options.min_generated > options.max_generated) {
    TP_THROW(InvalidArgument, "trace", "llm-serving options need requests, max_concurrent, threads and ",
             "kv_block_tokens > 0 and 0 < min <= max for prompt and generated lengths");
  }
  if (options.model.layers == 0 || options.model.hidden == 0 || options.model.heads == 0 ||
      options.model.vocabulary == 0 || options.max_prompt + options.max_generated > options.model.max_sequence) {
    TP_THROW(InvalidArgument, "trace", "llm-serving model needs layers, hidden, heads and vocabulary > 0 and ",
             "max_prompt + max_generated (", options.max_prompt + options.max_generated, ") <= model.max_sequence (",
             options.model.max_sequence, ")");
  }
  Rng rng(options.seed);
  TraceBuilder builder(rng);
  ServingSimulation(builder, rng, options).run();
  return builder.finish("llm_serving(seed=" + std::to_string(options.seed) + ")");
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

std::vector<std::string> trace_kinds() {
  return {"random", "training", "varying_shape", "llm_serving", "growing_batch"};
}

Trace generate_trace(std::string_view kind, std::uint64_t seed) {
  if (kind == "random") {
    RandomTraceOptions options;
    options.seed = seed;
    return generate_random_trace(options);
  }
  if (kind == "training") {
    TrainingTraceOptions options;
    options.seed = seed;
    return generate_training_trace(options);
  }
  if (kind == "varying_shape") {
    VaryingShapeTraceOptions options;
    options.seed = seed;
    return generate_varying_shape_trace(options);
  }
  if (kind == "llm_serving") {
    LlmServingTraceOptions options;
    options.seed = seed;
    return generate_llm_serving_trace(options);
  }
  if (kind == "growing_batch") {
    GrowingBatchTraceOptions options;
    options.seed = seed;
    return generate_growing_batch_trace(options);
  }
  std::string kinds;
  for (const std::string& name : trace_kinds()) kinds += (kinds.empty() ? "" : ", ") + name;
  TP_THROW(InvalidArgument, "trace", "unknown trace kind '", kind, "'; use one of ", kinds);
}

}  // namespace tp::memory

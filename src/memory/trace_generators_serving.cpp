// SPDX-License-Identifier: Apache-2.0
// The llm_serving generator, driven by ServingSimulation.
#include <algorithm>
#include <string>
#include <vector>

#include "memory/trace_synthesis.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/trace_generators.hpp"

namespace tp::memory {
namespace trace_synthesis {
namespace {

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
}  // namespace trace_synthesis

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
  trace_synthesis::Rng rng(options.seed);
  trace_synthesis::TraceBuilder builder(rng);
  trace_synthesis::ServingSimulation(builder, rng, options).run();
  return builder.finish("llm_serving(seed=" + std::to_string(options.seed) + ")");
}

}  // namespace tp::memory

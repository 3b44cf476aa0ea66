// SPDX-License-Identifier: Apache-2.0
#pragma once
// Synthetic allocation traces, deterministic for a given seed on every platform (own PRNG, no std::
// distributions), for tests, the replay benchmark and `tensorpool trace generate`:
//   - random: RMM's random_allocations pattern: each step allocates (probability 0.73) a uniform size in
//     [min_bytes, max_bytes] or frees a random live allocation; an allocation that would take live bytes
//     past max_live_bytes frees instead. Remaining allocations are freed at the end.
//   - training: a transformer-like model trained with Adam: parameters first, then per step the forward
//     pass allocates saved activations, the backward pass frees them in reverse while allocating
//     gradients, the optimizer's states appear lazily after the first backward, gradients are freed after
//     each update (set_to_none). A second thread (the data loader) prefetches each next batch.
//   - varying_shape: the same model, but batch and sequence length change every step, so every activation
//     size changes too: the pattern that fragments best-fit allocators.
//   - llm_serving: a decoder-only model serving requests of random prompt and generated lengths. The weights
//     are allocated first and stay live. Up to max_concurrent requests run at once: a request's prefill
//     allocates its prompt ids and a KV cache of whole blocks of kv_block_tokens tokens, runs its prompt
//     through the layers (activations freed as soon as the next layer has read them); then one decode step
//     per token for the whole batch of running requests allocates and frees that step's activations (their
//     sizes follow the batch and its longest request); a full cache is reallocated one block larger (new
//     first, then the old freed, as a copy needs); a finished request frees its cache and ids. Request r's
//     prefill, cache and frees run on thread r mod threads; decode steps on thread 0.
//   - growing_batch: the training model with a batch-size ramp: the batch doubles every steps_per_doubling
//     steps from initial_batch up to max_batch, so every activation grows: the pattern that defeats caches
//     sized for the first steps. A second thread (the data loader) prefetches each next batch.
//   - fragmenting: made for one replay capacity (capacity_bytes, `tensorpool replay --capacity 64MiB` by
//     default). Each step fills 7/8 of it with groups of one large block (whole granules of 2 MiB) followed by
//     pairs of a small kept block and a small temporary one (the group padded to a whole granule), frees every
//     temporary and every other large block, then asks for one block larger than any hole and than the free
//     tail, yet smaller than what the limit leaves beside the live bytes; then frees everything. A best-fit
//     allocator (bfc) and the expandable arena (whose kept blocks pin every granule) both run out of memory
//     with enough free in total: the case compaction (ExpandableArena::compact) serves.
// Pointers are synthetic (0x7f0000000000 upwards, 256-byte aligned, never reused); Time is integer ns.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/trace.hpp"

namespace tp::memory {

struct RandomTraceOptions {
  std::uint64_t seed = 1;
  std::size_t steps = 50'000;  // allocate-or-free steps, before the final frees
  double allocate_probability = 0.73;
  std::size_t min_bytes = kKiB;
  std::size_t max_bytes = 4 * kMiB;
  std::size_t max_live_bytes = 384 * kMiB;
  std::size_t threads = 1;  // each event is given to a thread chosen at random
};

// Shape of the transformer-like model (float32 everywhere).
struct ModelOptions {
  std::size_t layers = 6;
  std::size_t hidden = 384;
  std::size_t heads = 6;
  std::size_t vocabulary = 8192;
  std::size_t max_sequence = 512;  // rows of the position embedding
};

struct TrainingTraceOptions {
  std::uint64_t seed = 1;
  std::size_t steps = 50;
  ModelOptions model;
  std::size_t batch = 4;
  std::size_t sequence = 256;
};

struct VaryingShapeTraceOptions {
  std::uint64_t seed = 1;
  std::size_t steps = 50;
  ModelOptions model;
  std::size_t min_batch = 1;
  std::size_t max_batch = 8;
  std::size_t min_sequence = 32;
  std::size_t max_sequence = 512;
  std::size_t max_tokens = 1024;  // batch * sequence is redrawn until it fits
};

// Decoder-only model served by llm_serving (float32, KV cache of 2 x layers x hidden floats per token).
struct LlmServingTraceOptions {
  std::uint64_t seed = 1;
  ModelOptions model{.layers = 4, .hidden = 768, .heads = 12, .vocabulary = 8192, .max_sequence = 1024};
  std::size_t requests = 48;
  std::size_t max_concurrent = 8;  // requests decoded together at most
  std::size_t min_prompt = 16;
  std::size_t max_prompt = 512;
  std::size_t min_generated = 16;
  std::size_t max_generated = 256;   // max_prompt + max_generated <= model.max_sequence
  std::size_t kv_block_tokens = 32;  // a full KV cache grows by this many tokens
  std::size_t threads = 2;           // request r runs its prefill and cache on thread r mod threads
};

struct GrowingBatchTraceOptions {
  std::uint64_t seed = 1;
  std::size_t steps = 40;
  ModelOptions model;
  std::size_t sequence = 128;
  std::size_t initial_batch = 1;
  std::size_t max_batch = 8;
  std::size_t steps_per_doubling = 10;
};

struct FragmentingTraceOptions {
  std::uint64_t seed = 1;
  std::size_t capacity_bytes = 64 * kMiB;  // the replay capacity the trace is made for; >= 32 MiB
  std::size_t steps = 4;                   // fill, free, large request, free all
  std::size_t pairs_per_group = 4;         // small kept/temporary pairs after each large block
};

// What generate_fragmenting_trace lays out in one step (for tests and docs): the bytes live when the large
// request comes, the free tail of the capacity, the largest hole below it, and the request.
struct FragmentingStep {
  std::size_t live_bytes = 0;
  std::size_t tail_bytes = 0;
  std::size_t largest_hole_bytes = 0;
  std::size_t request_bytes = 0;
};

// The batch of step `step` (from 0) under `options`' schedule: initial_batch doubled once per
// steps_per_doubling steps, capped at max_batch.
[[nodiscard]] std::size_t growing_batch_at(const GrowingBatchTraceOptions& options, std::size_t step) noexcept;

[[nodiscard]] Trace generate_random_trace(const RandomTraceOptions& options = {});
[[nodiscard]] Trace generate_training_trace(const TrainingTraceOptions& options = {});
[[nodiscard]] Trace generate_varying_shape_trace(const VaryingShapeTraceOptions& options = {});
[[nodiscard]] Trace generate_llm_serving_trace(const LlmServingTraceOptions& options = {});
[[nodiscard]] Trace generate_growing_batch_trace(const GrowingBatchTraceOptions& options = {});
// Throws tp::InvalidArgument for a capacity below 32 MiB, no steps or no pairs. `steps_out`, when given,
// receives each step's layout.
[[nodiscard]] Trace generate_fragmenting_trace(const FragmentingTraceOptions& options = {},
                                               std::vector<FragmentingStep>* steps_out = nullptr);

// The bundled trace kinds by name: "random", "training", "varying_shape", "llm_serving", "growing_batch",
// "fragmenting", each
// with default options and the given seed. Throws tp::InvalidArgument for another name, listing these.
[[nodiscard]] Trace generate_trace(std::string_view kind, std::uint64_t seed = 1);
[[nodiscard]] std::vector<std::string> trace_kinds();

}  // namespace tp::memory

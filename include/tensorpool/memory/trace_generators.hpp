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

[[nodiscard]] Trace generate_random_trace(const RandomTraceOptions& options = {});
[[nodiscard]] Trace generate_training_trace(const TrainingTraceOptions& options = {});
[[nodiscard]] Trace generate_varying_shape_trace(const VaryingShapeTraceOptions& options = {});

// The bundled trace kinds by name: "random", "training", "varying_shape", each with default options and the
// given seed. Throws tp::InvalidArgument for another name, listing these.
[[nodiscard]] Trace generate_trace(std::string_view kind, std::uint64_t seed = 1);
[[nodiscard]] std::vector<std::string> trace_kinds();

}  // namespace tp::memory

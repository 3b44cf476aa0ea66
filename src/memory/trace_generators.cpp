// SPDX-License-Identifier: Apache-2.0
// The random trace and the dispatch by kind; the model-driven generators live in trace_generators_training.cpp
// (training, varying_shape, growing_batch), trace_generators_serving.cpp (llm_serving) and
// trace_generators_fragmenting.cpp (fragmenting).
#include "tensorpool/memory/trace_generators.hpp"

#include <string>
#include <vector>

#include "memory/trace_synthesis.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::memory {

using trace_synthesis::Rng;
using trace_synthesis::TraceBuilder;

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

std::vector<std::string> trace_kinds() {
  return {"random", "training", "varying_shape", "llm_serving", "growing_batch", "fragmenting"};
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
  if (kind == "fragmenting") {
    FragmentingTraceOptions options;
    options.seed = seed;
    return generate_fragmenting_trace(options);
  }
  std::string kinds;
  for (const std::string& name : trace_kinds()) kinds += (kinds.empty() ? "" : ", ") + name;
  TP_THROW(InvalidArgument, "trace", "unknown trace kind '", kind, "'; use one of ", kinds);
}

}  // namespace tp::memory

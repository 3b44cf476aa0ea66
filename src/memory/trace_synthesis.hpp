// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the synthetic trace generators (trace_generators*.cpp) share: the platform-independent PRNG, the
// builder that appends events with synthetic pointers and times, and the transformer-like model's parameter
// layout. Internal to the library: the public interface is include/tensorpool/memory/trace_generators.hpp.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/trace.hpp"
#include "tensorpool/memory/trace_generators.hpp"

namespace tp::memory::trace_synthesis {

inline constexpr std::size_t kFloatBytes = 4;
inline constexpr std::size_t kIndexBytes = 8;
inline constexpr std::uintptr_t kFirstAddress = 0x7f0000000000;
inline constexpr std::uint64_t kMainThread = 0;
inline constexpr std::uint64_t kLoaderThread = 1;

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
inline constexpr std::size_t kTokenEmbedding = 0;
inline constexpr std::size_t kPositionEmbedding = 1;
inline constexpr std::size_t kFirstLayerParameter = 2;

inline std::size_t layer_parameter(std::size_t layer, LayerParameter which) {
  return kFirstLayerParameter + layer * kLayerParameters + which;
}

inline std::vector<std::size_t> parameter_bytes(const ModelOptions& model) {
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

}  // namespace tp::memory::trace_synthesis

// SPDX-License-Identifier: Apache-2.0
#pragma once
// ExampleMap: a per-example transformation of a Dataset's float32 features, applied while a batch is
// assembled (so the dataset keeps its compact source, e.g. 1 byte per pixel, and only batches are float32).
//
// Maps run in the order they were added, each on one example's features as a span of float32 values. The
// built-in divisions (normalize, divide_by) compute x / divisor exactly as float32 division, so normalize()
// turns the u8 pixel 255 into exactly 1.0f and 0 into 0.0f.

#include <functional>
#include <optional>
#include <span>
#include <string>

namespace tp::data {

class ExampleMap {
 public:
  using Function = std::function<void(std::span<float> features)>;

  // x / 255: u8 pixels (0..255) to [0, 1].
  [[nodiscard]] static ExampleMap normalize();
  // x / divisor; throws tp::InvalidArgument unless divisor is finite and non-zero.
  [[nodiscard]] static ExampleMap divide_by(float divisor);
  // `function` rewrites one example's features in place. It runs on the prefetch thread when the dataset
  // prefetches, and concurrently when several iterators run at once, so it must be thread-safe; an exception
  // it throws reaches the consumer's BatchIterator::next(). Throws tp::InvalidArgument for an empty function.
  [[nodiscard]] static ExampleMap custom(std::string name, Function function);

  // "normalize", "divide_by(10)", or the custom name.
  const std::string& name() const noexcept { return name_; }
  // The divisor of a division map; nullopt for a custom one.
  std::optional<float> divisor() const noexcept { return divisor_; }
  void apply(std::span<float> features) const;

 private:
  ExampleMap(std::string name, std::optional<float> divisor, Function function)
      : name_(std::move(name)), divisor_(divisor), function_(std::move(function)) {}

  std::string name_;
  std::optional<float> divisor_;  // exactly one of divisor_ and function_ is set
  Function function_;
};

}  // namespace tp::data

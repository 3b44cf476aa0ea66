// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reductions over one axis (the result drops it): sum and mean (accumulated in double), max, and argmax (i64,
// first index on ties). Max and argmax over an empty axis are errors; mean over one is NaN.

#include <cstdint>

#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

enum class Reduction { sum, mean, max };

// `axis` in [-rank, rank); negative counts from the end.
void reduce_into(const Tensor& x, std::int64_t axis, Reduction reduction, const Tensor& out,
                 const OpContext& context = {});
[[nodiscard]] Tensor reduce(const Tensor& x, std::int64_t axis, Reduction reduction, const OpContext& context = {});
[[nodiscard]] inline Tensor reduce_sum(const Tensor& x, std::int64_t axis, const OpContext& context = {}) {
  return reduce(x, axis, Reduction::sum, context);
}
[[nodiscard]] inline Tensor reduce_mean(const Tensor& x, std::int64_t axis, const OpContext& context = {}) {
  return reduce(x, axis, Reduction::mean, context);
}
[[nodiscard]] inline Tensor reduce_max(const Tensor& x, std::int64_t axis, const OpContext& context = {}) {
  return reduce(x, axis, Reduction::max, context);
}
void argmax_into(const Tensor& x, std::int64_t axis, const Tensor& out, const OpContext& context = {});
[[nodiscard]] Tensor argmax(const Tensor& x, std::int64_t axis, const OpContext& context = {});

}  // namespace tp::ops

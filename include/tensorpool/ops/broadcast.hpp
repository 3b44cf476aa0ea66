// SPDX-License-Identifier: Apache-2.0
#pragma once
// Broadcasts that undo a reduction (the gradients of sums, means and per-row scalings). Floating dtypes f32
// and f64; every tensor on one device.

#include <cstdint>

#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

enum class BroadcastMode {
  copy,  // every slice along the axis is x
  mean,  // every slice is x / size (the gradient of a mean over the axis)
};

// out has x's shape with one axis inserted at `axis` (in [-rank(out), rank(out)), negative from the end); each
// slice of out along that axis is x (divided by the axis length for `mean`).
void broadcast_axis_into(const Tensor& x, std::int64_t axis, const Tensor& out,
                         BroadcastMode mode = BroadcastMode::copy, const OpContext& context = {});
// The same, allocating out with `size` elements along the inserted axis.
[[nodiscard]] Tensor broadcast_axis(const Tensor& x, std::int64_t axis, std::int64_t size,
                                    BroadcastMode mode = BroadcastMode::copy, const OpContext& context = {});

// out[r, c] = x[r, c] * s[r] for x [rows, cols] and s [rows] (out may be x).
void scale_rows_into(const Tensor& x, const Tensor& s, const Tensor& out, const OpContext& context = {});
[[nodiscard]] Tensor scale_rows(const Tensor& x, const Tensor& s, const OpContext& context = {});

}  // namespace tp::ops

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Row-wise softmax and log-softmax of a row-major [rows, cols] matrix, numerically stable: each row is
// shifted by its maximum before exponentiating, so huge logits (1e4) cannot overflow, and -inf entries
// contribute exp(-inf) = 0. Every row is computed in double (exponentials, their sum, the log) and rounded to T
// once per output element.
//
//   softmax:     y[r, c] = exp(x[r, c] - m) / s            with m = max_c x[r, c], s = sum_c exp(x[r, c] - m)
//   log_softmax: y[r, c] = x[r, c] - m - log(s)
//
// A row that is entirely -inf, or holds +inf or NaN, has no defined distribution and yields NaN throughout
// (as numpy and TensorFlow). y may alias x. rows == 0 or cols == 0 touches nothing.

#include <cmath>
#include <cstdint>

namespace tp::backend::cpu {

template <typename T>
void softmax(const T* x, T* y, std::int64_t rows, std::int64_t cols);

template <typename T>
void log_softmax(const T* x, T* y, std::int64_t rows, std::int64_t cols);

extern template void softmax<float>(const float*, float*, std::int64_t, std::int64_t);
extern template void softmax<double>(const double*, double*, std::int64_t, std::int64_t);
extern template void log_softmax<float>(const float*, float*, std::int64_t, std::int64_t);
extern template void log_softmax<double>(const double*, double*, std::int64_t, std::int64_t);

namespace detail {

// Entries per intra-op chunk (parallel_for) of a loop taking one exponential per entry: an exponential costs
// many times a streaming element's work, yet a chunk must still be several times the cost of handing it to a
// helper thread (a microsecond or two when the helper is polling). So the main job's [32, 10] logits run on
// their caller, and its [128, 10] ones in three chunks.
inline constexpr std::int64_t kExpEntriesPerChunk = 512;

// Rows per chunk of such a loop over `cols` entries per row.
constexpr std::int64_t exp_rows_per_chunk(std::int64_t cols) noexcept {
  return cols >= kExpEntriesPerChunk ? 1 : kExpEntriesPerChunk / (cols > 0 ? cols : 1);
}

// Rows up to this many entries keep their exponentials (in double) while the row's sum is formed, so each
// entry's exponential is taken once; a wider row takes it again when writing (the same call on the same
// argument: the same bits either way).
inline constexpr std::int64_t kCachedExpCols = 256;

// The two numbers every stable softmax-style kernel needs from a row of `cols` >= 1 entries.
struct RowShift {
  double max = 0;      // m = max of the row (NaN if any entry is NaN)
  double sum_exp = 0;  // s = sum of exp(x - m), >= 1 for a finite m
};

template <typename T>
double row_max(const T* row, std::int64_t cols) {
  double max = static_cast<double>(row[0]);
  for (std::int64_t c = 1; c < cols; ++c) {
    const auto value = static_cast<double>(row[c]);
    if (value > max || std::isnan(value)) max = value;
    if (std::isnan(max)) break;
  }
  return max;
}

// m and s of a row; with `exps` non-null (room for cols entries) also exps[c] = exp(x[c] - m), the terms of s
// in the order they were summed.
template <typename T>
RowShift row_shift(const T* row, std::int64_t cols, double* exps = nullptr) {
  const double max = row_max(row, cols);
  double sum = 0;
  if (exps != nullptr) {
    for (std::int64_t c = 0; c < cols; ++c) {
      exps[c] = std::exp(static_cast<double>(row[c]) - max);
      sum += exps[c];
    }
  } else {
    for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(row[c]) - max);
  }
  return RowShift{max, sum};
}

}  // namespace detail
}  // namespace tp::backend::cpu

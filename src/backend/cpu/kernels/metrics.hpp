// SPDX-License-Identifier: Apache-2.0
#pragma once
// Classification metrics on a row-major [rows, cols] batch of scores (logits or probabilities) with one
// integer class label per row (int32 or int64).
//
//   correct_count = number of rows r with argmax_c predictions[r, c] == labels[r]
//
// The argmax follows the argmax kernel's rules (reduce.hpp): the first index of the maximum on ties, and the
// index of the first NaN when a row holds one. Every label must lie in [0, cols): all are checked before
// anything is counted, and a bad one throws tp::InvalidArgument naming the row, the value and the class
// count (as the cross-entropy kernels do), so cols == 0 with rows > 0 always throws. rows == 0 gives 0.

#include <cstdint>

namespace tp::backend::cpu {

template <typename T, typename Label>
std::int64_t correct_count(const T* predictions, const Label* labels, std::int64_t rows, std::int64_t cols);

#define TP_CPU_METRICS_DECLARE(T, Label) \
  extern template std::int64_t correct_count<T, Label>(const T*, const Label*, std::int64_t, std::int64_t);
TP_CPU_METRICS_DECLARE(float, std::int32_t)
TP_CPU_METRICS_DECLARE(float, std::int64_t)
TP_CPU_METRICS_DECLARE(double, std::int32_t)
TP_CPU_METRICS_DECLARE(double, std::int64_t)
#undef TP_CPU_METRICS_DECLARE

}  // namespace tp::backend::cpu

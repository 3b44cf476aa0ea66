// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reductions over one axis of a contiguous row-major tensor viewed as [outer, axis, inner]: element
// (o, a, i) is x[(o * axis + a) * inner + i], and the output is [outer, inner] (y[o * inner + i]). Any
// tensor and axis fit this view: outer is the product of the dims before the axis, inner of those after.
// y must not overlap x.
//
// Accumulation: sums run in double for both float and double inputs, sequentially along the axis (not
// pairwise); the double result is rounded to T once at the end. So a float sum carries one final rounding
// plus at most axis * 2^-53 * sum|x| of accumulation error (2^29 times less than summing in float), and a
// double sum has that classic sequential bound.
//
// Empty axes: reduce_sum gives 0; reduce_mean gives NaN (0 / 0, as numpy); reduce_max and argmax have no
// identity and throw tp::InvalidArgument naming the axis length (as numpy does), even when outer or inner
// is 0. An empty outer or inner (with a non-empty axis) produces an empty output and touches nothing.
//
// NaN: reduce_max returns NaN if any element along the axis is NaN, and argmax returns the index of the
// first NaN (numpy's rule). Otherwise argmax returns the first index of the maximum on ties.

#include <cstdint>

namespace tp::backend::cpu {

template <typename T>
void reduce_sum(const T* x, T* y, std::int64_t outer, std::int64_t axis, std::int64_t inner);

template <typename T>
void reduce_mean(const T* x, T* y, std::int64_t outer, std::int64_t axis, std::int64_t inner);

template <typename T>
void reduce_max(const T* x, T* y, std::int64_t outer, std::int64_t axis, std::int64_t inner);

template <typename T>
void argmax(const T* x, std::int64_t* y, std::int64_t outer, std::int64_t axis, std::int64_t inner);

#define TP_CPU_REDUCE_DECLARE(T)                                                               \
  extern template void reduce_sum<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t);  \
  extern template void reduce_mean<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t); \
  extern template void reduce_max<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t);  \
  extern template void argmax<T>(const T*, std::int64_t*, std::int64_t, std::int64_t, std::int64_t);
TP_CPU_REDUCE_DECLARE(float)
TP_CPU_REDUCE_DECLARE(double)
#undef TP_CPU_REDUCE_DECLARE

}  // namespace tp::backend::cpu

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Row- and axis-wise broadcasts on contiguous row-major buffers, the building blocks of reduction gradients:
//
//   broadcast_axis: y[o, a, i] = alpha * x[o, i]      y viewed as [outer, axis, inner], x as [outer, inner]
//                   (re-inserts an axis a reduction removed; alpha = 1 / axis gives the gradient of a mean)
//   scale_rows:     y[r, c]    = x[r, c] * s[r]       for a row-major [rows, cols] x and a [rows] s
//
// broadcast_axis: y must not overlap x. scale_rows: y may alias x (element for element); s must not overlap
// y. Empty sizes touch nothing. Sizes are checked as every CPU kernel checks them (check.hpp).

#include <cstdint>

namespace tp::backend::cpu {

template <typename T>
void broadcast_axis(const T* x, T* y, std::int64_t outer, std::int64_t axis, std::int64_t inner, T alpha);

template <typename T>
void scale_rows(const T* x, const T* s, T* y, std::int64_t rows, std::int64_t cols);

#define TP_CPU_BROADCAST_DECLARE(T)                                                                  \
  extern template void broadcast_axis<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t, T); \
  extern template void scale_rows<T>(const T*, const T*, T*, std::int64_t, std::int64_t);
TP_CPU_BROADCAST_DECLARE(float)
TP_CPU_BROADCAST_DECLARE(double)
#undef TP_CPU_BROADCAST_DECLARE

}  // namespace tp::backend::cpu

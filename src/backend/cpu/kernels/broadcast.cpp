// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/broadcast.hpp"

#include <algorithm>
#include <string_view>

#include "backend/cpu/kernels/check.hpp"

namespace tp::backend::cpu {

template <typename T>
void broadcast_axis(const T* x, T* y, std::int64_t outer, std::int64_t axis, std::int64_t inner, T alpha) {
  constexpr std::string_view kKernel = "broadcast_axis";
  detail::check_size(kKernel, "outer", outer);
  detail::check_size(kKernel, "axis", axis);
  detail::check_size(kKernel, "inner", inner);
  const std::int64_t in_count = detail::checked_product(kKernel, outer, inner);
  const std::int64_t out_count = detail::checked_product(kKernel, in_count, axis);
  // x is read only when y has elements: an empty axis leaves a non-empty x unread.
  detail::check_pointer(kKernel, "x", x, out_count == 0 ? 0 : in_count);
  detail::check_pointer(kKernel, "y", y, out_count);
  for (std::int64_t o = 0; o < outer; ++o) {
    const T* source = x + o * inner;
    for (std::int64_t a = 0; a < axis; ++a) {
      T* target = y + (o * axis + a) * inner;
      if (alpha == T{1}) {
        std::copy(source, source + inner, target);
      } else {
        for (std::int64_t i = 0; i < inner; ++i) target[i] = alpha * source[i];
      }
    }
  }
}

template <typename T>
void scale_rows(const T* x, const T* s, T* y, std::int64_t rows, std::int64_t cols) {
  constexpr std::string_view kKernel = "scale_rows";
  detail::check_size(kKernel, "rows", rows);
  detail::check_size(kKernel, "cols", cols);
  const std::int64_t count = detail::checked_product(kKernel, rows, cols);
  detail::check_pointer(kKernel, "x", x, count);
  detail::check_pointer(kKernel, "s", s, count == 0 ? 0 : rows);
  detail::check_pointer(kKernel, "y", y, count);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T factor = s[r];
    for (std::int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * factor;
  }
}

#define TP_CPU_BROADCAST_DEFINE(T)                                                            \
  template void broadcast_axis<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t, T); \
  template void scale_rows<T>(const T*, const T*, T*, std::int64_t, std::int64_t);
TP_CPU_BROADCAST_DEFINE(float)
TP_CPU_BROADCAST_DEFINE(double)
#undef TP_CPU_BROADCAST_DEFINE

}  // namespace tp::backend::cpu

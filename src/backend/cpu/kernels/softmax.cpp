// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/softmax.hpp"

#include <array>
#include <string_view>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/check.hpp"

namespace tp::backend::cpu {
namespace {

template <typename T>
std::int64_t check_matrix(std::string_view kernel, const T* x, const T* y, std::int64_t rows, std::int64_t cols) {
  detail::check_size(kernel, "rows", rows);
  detail::check_size(kernel, "cols", cols);
  const std::int64_t count = detail::checked_product(kernel, rows, cols);
  detail::check_pointer(kernel, "x", x, count);
  detail::check_pointer(kernel, "y", y, count);
  return count;
}

}  // namespace

template <typename T>
void softmax(const T* x, T* y, std::int64_t rows, std::int64_t cols) {
  if (check_matrix("softmax", x, y, rows, cols) == 0) return;
  parallel_for(rows, detail::exp_rows_per_chunk(cols), [&](std::int64_t first_row, std::int64_t end_row) {
    std::array<double, detail::kCachedExpCols> exps{};
    const bool cached = cols <= detail::kCachedExpCols;
    for (std::int64_t r = first_row; r < end_row; ++r) {
      const T* in = x + r * cols;
      T* out = y + r * cols;
      const detail::RowShift shift = detail::row_shift(in, cols, cached ? exps.data() : nullptr);
      // Each out[c] is written only after in[c] was read for the last time, so y may alias x.
      for (std::int64_t c = 0; c < cols; ++c) {
        const double term =
            cached ? exps[static_cast<std::size_t>(c)] : std::exp(static_cast<double>(in[c]) - shift.max);
        out[c] = static_cast<T>(term / shift.sum_exp);
      }
    }
  });
}

template <typename T>
void log_softmax(const T* x, T* y, std::int64_t rows, std::int64_t cols) {
  if (check_matrix("log_softmax", x, y, rows, cols) == 0) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* in = x + r * cols;
    T* out = y + r * cols;
    const detail::RowShift shift = detail::row_shift(in, cols);
    const double log_sum = std::log(shift.sum_exp);
    for (std::int64_t c = 0; c < cols; ++c) {
      out[c] = static_cast<T>((static_cast<double>(in[c]) - shift.max) - log_sum);
    }
  }
}

template void softmax<float>(const float*, float*, std::int64_t, std::int64_t);
template void softmax<double>(const double*, double*, std::int64_t, std::int64_t);
template void log_softmax<float>(const float*, float*, std::int64_t, std::int64_t);
template void log_softmax<double>(const double*, double*, std::int64_t, std::int64_t);

}  // namespace tp::backend::cpu

// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/bias.hpp"

#include <string_view>

#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/elementwise.hpp"
#include "backend/cpu/kernels/reduce.hpp"

namespace tp::backend::cpu {
namespace {

// Checked here too so that errors name this kernel and its arguments rather than the one it delegates to.
void check_rows_cols(std::string_view kernel, std::int64_t rows, std::int64_t cols) {
  detail::check_size(kernel, "rows", rows);
  detail::check_size(kernel, "cols", cols);
}

}  // namespace

template <typename T>
void bias_add(const T* x, const T* bias, T* y, std::int64_t rows, std::int64_t cols) {
  constexpr std::string_view kKernel = "bias_add";
  check_rows_cols(kKernel, rows, cols);
  const std::int64_t count = detail::checked_product(kKernel, rows, cols);
  detail::check_pointer(kKernel, "x", x, count);
  detail::check_pointer(kKernel, "bias", bias, count == 0 ? 0 : cols);
  detail::check_pointer(kKernel, "y", y, count);
  binary_row_broadcast(BinaryOp::add, x, bias, y, rows, cols);
}

template <typename T>
void bias_add_grad(const T* dy, T* dbias, std::int64_t rows, std::int64_t cols) {
  constexpr std::string_view kKernel = "bias_add_grad";
  check_rows_cols(kKernel, rows, cols);
  detail::check_pointer(kKernel, "dy", dy, detail::checked_product(kKernel, rows, cols));
  detail::check_pointer(kKernel, "dbias", dbias, cols);
  // [rows, cols] seen as [outer = 1, axis = rows, inner = cols], reduced over the axis.
  reduce_sum(dy, dbias, 1, rows, cols);
}

template void bias_add<float>(const float*, const float*, float*, std::int64_t, std::int64_t);
template void bias_add<double>(const double*, const double*, double*, std::int64_t, std::int64_t);
template void bias_add_grad<float>(const float*, float*, std::int64_t, std::int64_t);
template void bias_add_grad<double>(const double*, double*, std::int64_t, std::int64_t);

}  // namespace tp::backend::cpu

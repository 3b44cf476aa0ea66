// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/half_nn.hpp"

#include <algorithm>
#include <array>
#include <string_view>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels/bf16_gemm.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/half_convert.hpp"

namespace tp::backend::cpu {

namespace {

// Per-thread float32 scratch for the GEMM operands: each stream's worker thread keeps its own, grown to the
// largest operands it has seen and never shrunk, so steady-state steps do not allocate.
struct GemmScratch {
  std::vector<float> a, b, c;
};

GemmScratch& gemm_scratch() {
  thread_local GemmScratch scratch;
  return scratch;
}

float* sized(std::vector<float>& buffer, std::int64_t count) {
  if (buffer.size() < static_cast<std::size_t>(count)) buffer.resize(static_cast<std::size_t>(count));
  return buffer.data();
}

}  // namespace

// The widening helper of the elementwise loops: looks the float16 table up once per call, not per element.
template <typename H>
struct Widener {
  const float* table = detail::half_to_float_table();
  float operator()(H value) const {
    if constexpr (std::is_same_v<H, Half>) {
      return detail::widen(value, table);
    } else {
      return detail::widen(value);
    }
  }
};

template <typename H>
void matmul_half(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 const H* a, const H* b, H* c, GemmLibrary library) {
  constexpr std::string_view kKernel = "matmul_half";
  detail::check_size(kKernel, "m", m);
  detail::check_size(kKernel, "n", n);
  detail::check_size(kKernel, "k", k);
  const std::int64_t a_size = detail::checked_product(kKernel, m, k);
  const std::int64_t b_size = detail::checked_product(kKernel, k, n);
  const std::int64_t c_size = detail::checked_product(kKernel, m, n);
  detail::check_pointer(kKernel, "a", a, a_size);
  detail::check_pointer(kKernel, "b", b, b_size);
  detail::check_pointer(kKernel, "c", c, c_size);
  if (c_size == 0) return;
  if constexpr (std::is_same_v<H, BFloat16>) {
    if (k > 0 && bf16_gemm_native()) {
      matmul_bf16_onednn(transpose_a, transpose_b, m, n, k, a, b, c);
      return;
    }
  }
  GemmScratch& scratch = gemm_scratch();
  float* a32 = sized(scratch.a, a_size);
  float* b32 = sized(scratch.b, b_size);
  float* c32 = sized(scratch.c, c_size);
  detail::widen_span(a, a32, a_size);
  detail::widen_span(b, b32, b_size);
  matmul<float>(transpose_a, transpose_b, m, n, k, 1.0F, a32, b32, 0.0F, c32, library);  // its k == 0 rule too
  detail::narrow_span(c32, c, c_size);
}

template <typename H>
void bias_add_half(const H* x, const H* bias, H* y, std::int64_t rows, std::int64_t cols) {
  constexpr std::string_view kKernel = "bias_add_half";
  detail::check_size(kKernel, "rows", rows);
  detail::check_size(kKernel, "cols", cols);
  const std::int64_t count = detail::checked_product(kKernel, rows, cols);
  detail::check_pointer(kKernel, "x", x, count);
  detail::check_pointer(kKernel, "bias", bias, count == 0 ? 0 : cols);
  detail::check_pointer(kKernel, "y", y, count);
  const Widener<H> widen;
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t col = 0; col < cols; ++col) {
      const std::int64_t i = row * cols + col;
      y[i] = detail::narrow<H>(widen(x[i]) + widen(bias[col]));
    }
  }
}

template <typename H>
void bias_add_grad_half(const H* dy, H* dbias, std::int64_t rows, std::int64_t cols) {
  constexpr std::string_view kKernel = "bias_add_grad_half";
  detail::check_size(kKernel, "rows", rows);
  detail::check_size(kKernel, "cols", cols);
  detail::check_pointer(kKernel, "dy", dy, detail::checked_product(kKernel, rows, cols));
  detail::check_pointer(kKernel, "dbias", dbias, cols);
  std::vector<double> sums(static_cast<std::size_t>(cols), 0.0);  // cols doubles: the bias size, small
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t col = 0; col < cols; ++col)
      sums[static_cast<std::size_t>(col)] += detail::widen(dy[row * cols + col]);
  }
  for (std::int64_t col = 0; col < cols; ++col) {
    dbias[col] = detail::narrow<H>(static_cast<float>(sums[static_cast<std::size_t>(col)]));
  }
}

template <typename H>
void relu_half(const H* x, H* y, std::int64_t n) {
  constexpr std::string_view kKernel = "relu_half";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "x", x, n);
  detail::check_pointer(kKernel, "y", y, n);
  // `value <= 0` is false for NaN, so NaN passes through unchanged, as the float kernel does.
  const Widener<H> widen;
  for (std::int64_t i = 0; i < n; ++i) y[i] = widen(x[i]) <= 0.0F ? H{} : x[i];
}

template <typename H>
void relu_grad_half(const H* dy, const H* x, H* dx, std::int64_t n) {
  constexpr std::string_view kKernel = "relu_grad_half";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "dy", dy, n);
  detail::check_pointer(kKernel, "x", x, n);
  detail::check_pointer(kKernel, "dx", dx, n);
  const Widener<H> widen;
  for (std::int64_t i = 0; i < n; ++i) dx[i] = widen(x[i]) > 0.0F ? dy[i] : H{};
}

template <typename H>
void add_scaled_half(H* y, float alpha, const H* x, std::int64_t n) {
  constexpr std::string_view kKernel = "add_scaled_half";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "y", y, n);
  detail::check_pointer(kKernel, "x", x, n);
  constexpr std::int64_t kBlock = 2048;  // two 8 KiB float32 blocks on the stack
  std::array<float, kBlock> sum, addend;
  for (std::int64_t offset = 0; offset < n; offset += kBlock) {
    const std::int64_t count = std::min(kBlock, n - offset);
    detail::widen_span(y + offset, sum.data(), count);
    detail::widen_span(x + offset, addend.data(), count);
    for (std::int64_t i = 0; i < count; ++i)
      sum[static_cast<std::size_t>(i)] += alpha * addend[static_cast<std::size_t>(i)];
    detail::narrow_span(sum.data(), y + offset, count);
  }
}

TP_DECLARE_HALF_NN(Half, )
TP_DECLARE_HALF_NN(BFloat16, )

}  // namespace tp::backend::cpu

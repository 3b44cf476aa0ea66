// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/half_nn.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/bf16_gemm.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/gemm_auto.hpp"
#include "backend/cpu/kernels/half_convert.hpp"
#include "backend/cpu/kernels/isa_clones.hpp"

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

// The bits of +Inf; a larger magnitude (bits & 0x7FFF) is a NaN. Both formats are sign-magnitude, so the
// float comparisons of relu and relu_grad are comparisons of the bits (branch-free: the loops vectorise).
template <typename H>
constexpr std::uint32_t kInfinityBits = std::is_same_v<H, Half> ? 0x7C00U : 0x7F80U;

// The loops below run on chunks of the intra-op threads' split (parallel_for): each element (each column, for
// the bias gradient) is computed by one thread in one order, so the bits do not depend on the thread count.
// One clone per instruction set (isa_clones.hpp); -ffp-contract=off keeps the clones' bits equal.
template <typename H>
TP_ISA_CLONES void bias_add_half_rows(const H* x, const H* bias, H* y, std::int64_t rows, std::int64_t cols) {
  const Widener<H> widen;
  for (std::int64_t row = 0; row < rows; ++row) {
    const H* x_row = x + row * cols;
    H* y_row = y + row * cols;
    for (std::int64_t col = 0; col < cols; ++col) y_row[col] = detail::narrow<H>(widen(x_row[col]) + widen(bias[col]));
  }
}

// Sums of the columns [begin, end) of dy, in row order, into sums[begin, end).
template <typename H>
TP_ISA_CLONES void column_sums_half(const H* dy, double* sums, std::int64_t rows, std::int64_t cols, std::int64_t begin,
                                    std::int64_t end) {
  const Widener<H> widen;
  for (std::int64_t row = 0; row < rows; ++row) {
    const H* dy_row = dy + row * cols;
    for (std::int64_t col = begin; col < end; ++col) sums[col] += static_cast<double>(widen(dy_row[col]));
  }
}

// y = x unless x <= 0 (then +0): x is kept when it is positive (bits 1 to 0x7FFF: positive finite, +Inf,
// positive NaNs) or a NaN of either sign; -0, +0 and negative numbers give +0.
template <typename H>
TP_ISA_CLONES void relu_half_loop(const H* x, H* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t bits = x[i].bits;
    const bool keep = bits - 1U < 0x7FFFU || (bits & 0x7FFFU) > kInfinityBits<H>;
    y[i] = H::from_bits(static_cast<std::uint16_t>(keep ? bits : 0U));
  }
}

// dx = dy where x > 0 (bits 1 to +Inf's: not zero, not negative, not NaN), else +0. dy is loaded
// unconditionally so that the loop vectorises.
template <typename H>
TP_ISA_CLONES void relu_grad_half_loop(const H* dy, const H* x, H* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t bits = x[i].bits;
    const std::uint32_t gradient = dy[i].bits;
    dx[i] = H::from_bits(static_cast<std::uint16_t>(bits - 1U < kInfinityBits<H> ? gradient : 0U));
  }
}

template <typename H>
void check_matmul_operands(std::string_view kernel, std::int64_t m, std::int64_t n, std::int64_t k, const H* a,
                           const H* b, const H* c) {
  detail::check_size(kernel, "m", m);
  detail::check_size(kernel, "n", n);
  detail::check_size(kernel, "k", k);
  detail::check_pointer(kernel, "a", a, detail::checked_product(kernel, m, k));
  detail::check_pointer(kernel, "b", b, detail::checked_product(kernel, k, n));
  detail::check_pointer(kernel, "c", c, detail::checked_product(kernel, m, n));
}

// Widened over the intra-op threads (element-wise: the bits do not depend on the split).
template <typename H>
void widen_in_chunks(const H* src, float* dst, std::int64_t n) {
  parallel_for(n, kStreamingGrain, [&](std::int64_t begin, std::int64_t end) {
    detail::widen_span(src + begin, dst + begin, end - begin);
  });
}

// Which bfloat16 product is fastest on this CPU, per shape: oneDNN's kernels on the bfloat16 instructions
// (AVX512_BF16's dot products do as many multiply-adds per cycle as float32 FMAs, so on a CPU without AMX
// they need not beat a good float32 GEMM), the same at a whole AMX tile's depth where oneDNN takes the tiles
// only for a deeper product (bf16_gemm.hpp), or the float32 GEMM of the device's library on the widened
// operands. All give float32 sums of exact products, rounded once to bfloat16. Timed at the shape's first
// product (each path once to warm it up, then the best of three alternating runs) and kept for the process
// and, as the float32 library choices are, in the machine's GEMM auto cache (gemm_auto.hpp), so that the
// same command computes the same bits run after run: a product's bits depend on its shape and that choice,
// never on the thread count. One measurement runs at a time in this table, and it only grows (until
// reset_gemm_auto_choices() plays a new process).
enum class Bf16Path { native, padded, widened };

constexpr std::array<std::string_view, 3> kBf16PathNames = {"native", "padded", "widened"};

std::string_view path_name(Bf16Path path) { return kBf16PathNames.at(static_cast<std::size_t>(path)); }

struct Bf16Choices {
  std::mutex mutex;
  std::uint64_t generation = 0;  // gemm_auto_generation() when `path` was last cleared
  std::map<std::tuple<bool, bool, std::int64_t, std::int64_t, std::int64_t, GemmLibrary>, Bf16Path> path;
};

// The product's name in the cache file, e.g. "bfloat16 784x512x16 A^T (float32 via auto)".
std::string product_class(const GemmShape& shape, GemmLibrary library) {
  return "bfloat16 " + std::to_string(shape.m) + "x" + std::to_string(shape.n) + "x" + std::to_string(shape.k) +
         (shape.transpose_a == Transpose::yes ? " A^T" : "") + (shape.transpose_b == Transpose::yes ? " B^T" : "") +
         " (float32 via " + std::string(name_of(library)) + ")";
}

// `product(path)` computes the caller's product by `path`; a template, so that the steady state (a shape already
// chosen) wraps nothing.
template <typename Product>
Bf16Path fastest_bf16_path(const GemmShape& shape, GemmLibrary library, const Product& product, bool padding) {
  static auto* const choices = new Bf16Choices;  // never destroyed: device threads may multiply during exit
  const std::tuple key{
      shape.transpose_a == Transpose::yes, shape.transpose_b == Transpose::yes, shape.m, shape.n, shape.k, library};
  const std::lock_guard lock(choices->mutex);
  if (const std::uint64_t generation = gemm_auto_generation(); generation != choices->generation) {
    choices->path.clear();
    choices->generation = generation;
  }
  const auto found = choices->path.find(key);
  if (found != choices->path.end()) return found->second;
  std::vector<Bf16Path> candidates{Bf16Path::native, Bf16Path::widened};
  if (padding) candidates.push_back(Bf16Path::padded);
  std::vector<std::string> names;
  for (const Bf16Path path : candidates) names.emplace_back(path_name(path));
  const auto measure = [&] {
    const auto seconds = [&](Bf16Path path) {
      const auto start = std::chrono::steady_clock::now();
      product(path);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    for (const Bf16Path path : candidates) product(path);
    std::vector<double> best(candidates.size(), std::numeric_limits<double>::infinity());
    for (int round = 0; round < 3; ++round) {
      for (std::size_t i = 0; i < candidates.size(); ++i) best[i] = std::min(best[i], seconds(candidates[i]));
    }
    // Ties go to the earlier candidate: native before widened, as before padding was a candidate.
    return names[static_cast<std::size_t>(std::min_element(best.begin(), best.end()) - best.begin())];
  };
  const std::string chosen = auto_gemm_path(product_class(shape, library), names, measure);
  const Bf16Path path =
      candidates[static_cast<std::size_t>(std::find(names.begin(), names.end(), chosen) - names.begin())];
  return choices->path.emplace(key, path).first->second;
}

}  // namespace

template <typename H>
void matmul_half_widened(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                         const H* a, const H* b, H* c, GemmLibrary library) {
  constexpr std::string_view kKernel = "matmul_half_widened";
  check_matmul_operands(kKernel, m, n, k, a, b, c);
  const std::int64_t a_size = m * k, b_size = k * n, c_size = m * n;  // checked above
  if (c_size == 0) return;
  GemmScratch& scratch = gemm_scratch();
  float* a32 = sized(scratch.a, a_size);
  float* b32 = sized(scratch.b, b_size);
  float* c32 = sized(scratch.c, c_size);
  widen_in_chunks(a, a32, a_size);
  widen_in_chunks(b, b32, b_size);
  matmul<float>(transpose_a, transpose_b, m, n, k, 1.0F, a32, b32, 0.0F, c32, library);  // its k == 0 rule too
  parallel_for(c_size, kStreamingGrain,
               [&](std::int64_t begin, std::int64_t end) { detail::narrow_span(c32 + begin, c + begin, end - begin); });
}

template <typename H>
void matmul_half(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 const H* a, const H* b, H* c, GemmLibrary library) {
  check_matmul_operands("matmul_half", m, n, k, a, b, c);
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<H, BFloat16>) {
    if (k > 0 && bf16_gemm_native()) {
      const std::int64_t tile_depth = bf16_gemm_tile_depth(k);
      const auto product = [&](Bf16Path path) {
        switch (path) {
          case Bf16Path::native: return matmul_bf16_onednn(transpose_a, transpose_b, m, n, k, a, b, c);
          case Bf16Path::padded:
            return matmul_bf16_onednn_at_depth(transpose_a, transpose_b, m, n, k, tile_depth, a, b, c);
          case Bf16Path::widened: return matmul_half_widened<H>(transpose_a, transpose_b, m, n, k, a, b, c, library);
        }
      };
      product(fastest_bf16_path({.m = m, .n = n, .k = k, .transpose_a = transpose_a, .transpose_b = transpose_b},
                                library, product, tile_depth != k));
      return;
    }
  }
  matmul_half_widened<H>(transpose_a, transpose_b, m, n, k, a, b, c, library);
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
  parallel_for(rows, rows_per_chunk(cols), [&](std::int64_t begin, std::int64_t end) {
    bias_add_half_rows(x + begin * cols, bias, y + begin * cols, end - begin, cols);
  });
}

template <typename H>
void bias_add_grad_half(const H* dy, H* dbias, std::int64_t rows, std::int64_t cols) {
  constexpr std::string_view kKernel = "bias_add_grad_half";
  detail::check_size(kKernel, "rows", rows);
  detail::check_size(kKernel, "cols", cols);
  detail::check_pointer(kKernel, "dy", dy, detail::checked_product(kKernel, rows, cols));
  detail::check_pointer(kKernel, "dbias", dbias, cols);
  std::vector<double> sums(static_cast<std::size_t>(cols), 0.0);  // cols doubles: the bias size, small
  // Chunks of whole columns, about kStreamingGrain elements each.
  const std::int64_t columns_per_chunk = std::max<std::int64_t>(1, kStreamingGrain / std::max<std::int64_t>(rows, 1));
  parallel_for(cols, columns_per_chunk, [&](std::int64_t begin, std::int64_t end) {
    column_sums_half(dy, sums.data(), rows, cols, begin, end);
  });
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
  // As the float kernel: `x <= 0` is false for NaN, so NaN passes through unchanged.
  parallel_for(n, kStreamingGrain,
               [&](std::int64_t begin, std::int64_t end) { relu_half_loop(x + begin, y + begin, end - begin); });
}

template <typename H>
void relu_grad_half(const H* dy, const H* x, H* dx, std::int64_t n) {
  constexpr std::string_view kKernel = "relu_grad_half";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "dy", dy, n);
  detail::check_pointer(kKernel, "x", x, n);
  detail::check_pointer(kKernel, "dx", dx, n);
  parallel_for(n, kStreamingGrain, [&](std::int64_t begin, std::int64_t end) {
    relu_grad_half_loop(dy + begin, x + begin, dx + begin, end - begin);
  });
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

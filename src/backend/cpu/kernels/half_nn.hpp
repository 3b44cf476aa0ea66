// SPDX-License-Identifier: Apache-2.0
#pragma once
// The MLP path's kernels on 16-bit floats (H = tp::Half or tp::BFloat16), for mixed precision.
//
// Storage is 16-bit; arithmetic is float32. bfloat16 matmul runs on the CPU's bfloat16 instructions through
// oneDNN where the CPU has them (bf16_gemm.hpp: AVX512_BF16). Otherwise, and always for float16 (Debian's
// OpenBLAS has no half-precision GEMM; this class of CPU has no float16 arithmetic), matmul converts A and B
// to float32 scratch, calls cblas_sgemm and rounds C once to H ("converted to f32 around sgemm, stored as
// f16/bf16"). The scratch is per thread and grows to the largest matrices seen, so a steady-state step
// allocates nothing after the first. Either way products accumulate in float32 and C is rounded once. Every other
// kernel widens, computes in float32 (bias_add_grad accumulates in double, as the float kernels do) and rounds each
// result once. Like the float kernels, they split over the intra-op threads (intra_op_pool.hpp) in element-wise
// (bias_add_grad: column-wise) chunks, so their bits do not depend on the thread count; relu and relu_grad
// compare the sign and magnitude bits, which is the float comparison for every pattern.
//
//   matmul_half:        C[m,n] = op(A) op(B), the layouts and empty-size rules of gemm.hpp (alpha 1, beta 0)
//   bias_add_half:      y[r,c] = x[r,c] + bias[c]          (y may alias x)
//   bias_add_grad_half: dbias[c] = sum over r of dy[r,c]   (rows == 0 gives zeros)
//   relu_half:          y = x > 0 ? x : 0                  (NaN propagates; y may alias x)
//   relu_grad_half:     dx = x > 0 ? dy : 0                (dx may alias dy or x)
//   add_scaled_half:    y = y + alpha x                    (the collectives' reduction; x must not overlap y)
// So each result is the float32 result rounded once to H: the error against exact arithmetic is at most
// half an ulp of H plus the float32 kernel's error (docs/mixed-precision.md lists the tested tolerances).

#include <cstdint>

#include "backend/cpu/kernels/gemm.hpp"
#include "tensorpool/core/half.hpp"

namespace tp::backend::cpu {

// `library`: the float32 GEMM that float16 (and bfloat16 without native instructions) is computed with.
// bfloat16 with native instructions: per shape, the fastest on this CPU of oneDNN's bfloat16 kernels (also
// at an AMX tile's depth, where that moves the product onto the tiles: bf16_gemm.hpp) and
// matmul_half_widened with `library`, timed at the shape's first product and then kept for the process and
// in the machine's GEMM auto cache (gemm_auto.hpp), so later runs choose the same.
template <typename H>
void matmul_half(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 const H* a, const H* b, H* c, GemmLibrary library = GemmLibrary::openblas);
// A and B widened to float32 scratch, the float32 GEMM of `library`, C rounded once to H.
template <typename H>
void matmul_half_widened(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                         const H* a, const H* b, H* c, GemmLibrary library = GemmLibrary::openblas);
template <typename H>
void bias_add_half(const H* x, const H* bias, H* y, std::int64_t rows, std::int64_t cols);
template <typename H>
void bias_add_grad_half(const H* dy, H* dbias, std::int64_t rows, std::int64_t cols);
template <typename H>
void relu_half(const H* x, H* y, std::int64_t n);
template <typename H>
void relu_grad_half(const H* dy, const H* x, H* dx, std::int64_t n);
template <typename H>
void add_scaled_half(H* y, float alpha, const H* x, std::int64_t n);

#define TP_DECLARE_HALF_NN(H, prefix)                                                                           \
  prefix template void matmul_half<H>(Transpose, Transpose, std::int64_t, std::int64_t, std::int64_t, const H*, \
                                      const H*, H*, GemmLibrary);                                               \
  prefix template void matmul_half_widened<H>(Transpose, Transpose, std::int64_t, std::int64_t, std::int64_t,   \
                                              const H*, const H*, H*, GemmLibrary);                             \
  prefix template void bias_add_half<H>(const H*, const H*, H*, std::int64_t, std::int64_t);                    \
  prefix template void bias_add_grad_half<H>(const H*, H*, std::int64_t, std::int64_t);                         \
  prefix template void relu_half<H>(const H*, H*, std::int64_t);                                                \
  prefix template void relu_grad_half<H>(const H*, const H*, H*, std::int64_t);                                 \
  prefix template void add_scaled_half<H>(H*, float, const H*, std::int64_t);

TP_DECLARE_HALF_NN(Half, extern)
TP_DECLARE_HALF_NN(BFloat16, extern)

}  // namespace tp::backend::cpu

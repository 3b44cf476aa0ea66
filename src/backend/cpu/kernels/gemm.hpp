// SPDX-License-Identifier: Apache-2.0
#pragma once
// Dense matrix multiply on the CPU through a BLAS library; no hand-written loop. float64 always goes to
// OpenBLAS (cblas_dgemm); float32 to the caller's GemmLibrary (a device's setting, kernel_settings.hpp):
// OpenBLAS's cblas_sgemm, oneDNN's dnnl_sgemm, or "auto" (what a device starts with): the faster of the two
// on this machine for the product's shape class, measured at its first product (gemm_auto.hpp). Which one
// wins depends on the CPU (tp_kernel_bench --sgemm-rate; docs/benchmarks.md). The two libraries sum in
// different orders: the same product differs between them in the last bits, while each keeps its results
// independent of the intra-op thread count (cpu_thread_count_test runs both, and auto).
//
//   C[m,n] = alpha * op(A) * op(B) + beta * C
//
// All matrices are row-major and contiguous. op(A) is m x k: A is stored m x k, or k x m when transposed.
// op(B) is k x n: B is stored k x n, or n x k when transposed. C must not overlap A or B.
// As in BLAS, beta == 0 means C is output only: whatever it held (even NaN) is overwritten, not scaled.
// Empty sizes are valid: m == 0 or n == 0 touches nothing; k == 0 gives C = beta * C (zeros if beta == 0).
// BLAS takes 32-bit sizes here, so m, n and k above INT_MAX are rejected with tp::InvalidArgument.

#include <cstdint>
#include <string_view>

namespace tp::backend::cpu {

enum class Transpose : bool { no = false, yes = true };

// automatic: per shape class, the library a short measurement found faster (gemm_auto.hpp); named "auto".
enum class GemmLibrary { openblas, onednn, automatic };

// "auto", "openblas" or "onednn"; tp::InvalidArgument naming `what` and the choices otherwise.
GemmLibrary parse_gemm_library(std::string_view text, std::string_view what);
std::string_view name_of(GemmLibrary library) noexcept;

// Does now, on this thread, what `library`'s first product would do before computing: oneDNN's kernel
// generation (also for automatic, which times oneDNN), once per process (a concurrent caller waits for it);
// nothing for OpenBLAS, which sets up when it is loaded.
void warm_up_gemm_library(GemmLibrary library);
// Whether warm_up_gemm_library has generated oneDNN's kernels in this process.
[[nodiscard]] bool gemm_library_warmed_up() noexcept;

namespace detail {
// Whether an m x n x k product is computed as two products over the halves of its depth (split-K, gemm.cpp):
// on a machine with an even CPU count, when k >= 2 m and both halves keep a block's minimum work.
[[nodiscard]] bool splits_depth(std::int64_t m, std::int64_t n, std::int64_t k) noexcept;
// Tests only: products split as on a machine with `ways` CPUs (the blocks' count and split-K's halves), so that
// a machine of two CPUs checks the splits of larger ones; 0 restores this machine's CPU count.
void set_split_ways_for_testing(std::int64_t ways) noexcept;
}  // namespace detail

// `library` computes float32 products (float64 ignores it). With GemmLibrary::automatic the whole product goes
// to the library chosen for its shape class before it is split into blocks, so every block of it uses the
// same library and the bits stay independent of the thread count.
template <typename T>
void matmul(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
            const T* a, const T* b, T beta, T* c, GemmLibrary library = GemmLibrary::openblas);

extern template void matmul<float>(Transpose, Transpose, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                                   const float*, float, float*, GemmLibrary);
extern template void matmul<double>(Transpose, Transpose, std::int64_t, std::int64_t, std::int64_t, double,
                                    const double*, const double*, double, double*, GemmLibrary);

}  // namespace tp::backend::cpu

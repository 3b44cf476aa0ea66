#pragma once
// Dense matrix multiply on the CPU through OpenBLAS (cblas_sgemm / cblas_dgemm); no hand-written loop.
//
//   C[m,n] = alpha * op(A) * op(B) + beta * C
//
// All matrices are row-major and contiguous. op(A) is m x k: A is stored m x k, or k x m when transposed.
// op(B) is k x n: B is stored k x n, or n x k when transposed. C must not overlap A or B.
// As in BLAS, beta == 0 means C is output only: whatever it held (even NaN) is overwritten, not scaled.
// Empty sizes are valid: m == 0 or n == 0 touches nothing; k == 0 gives C = beta * C (zeros if beta == 0).
// BLAS takes 32-bit sizes here, so m, n and k above INT_MAX are rejected with tp::InvalidArgument.

#include <cstdint>

namespace tp::backend::cpu {

enum class Transpose : bool { no = false, yes = true };

template <typename T>
void matmul(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
            const T* a, const T* b, T beta, T* c);

extern template void matmul<float>(Transpose, Transpose, std::int64_t, std::int64_t, std::int64_t, float,
                                   const float*, const float*, float, float*);
extern template void matmul<double>(Transpose, Transpose, std::int64_t, std::int64_t, std::int64_t, double,
                                    const double*, const double*, double, double*);

}  // namespace tp::backend::cpu

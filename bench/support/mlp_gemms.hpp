// SPDX-License-Identifier: Apache-2.0
#pragma once
// The GEMMs of one training step of the 784-512-10 MLP (row-major, as ops::matmul_into calls them): forward
// dense 1 and 2, the layer-2 input gradient, both weight gradients; 2 x (784x512 + 512x10 + 512x10 + 784x512 +
// 512x10) = 1,636,352 FLOPs per sample.

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tp::bench {

struct GemmCase {
  const char* role;
  std::int64_t m, n, k;
  bool transpose_a, transpose_b;
};

inline std::vector<GemmCase> training_gemms(std::int64_t batch) {
  return {
      {"forward dense 1", batch, 512, 784, false, false},      {"forward dense 2", batch, 10, 512, false, false},
      {"grad input 2 (dy W^T)", batch, 512, 10, false, true},  {"grad kernel 1 (x^T dy)", 784, 512, batch, true, false},
      {"grad kernel 2 (h^T dy)", 512, 10, batch, true, false},
  };
}

// Host operands of `shape` with fixed values (the timings do not depend on them) and room for C.
struct GemmOperands {
  std::vector<float> a, b, c;
};

inline GemmOperands gemm_operands(const GemmCase& shape) {
  GemmOperands operands{std::vector<float>(static_cast<std::size_t>(shape.m * shape.k)),
                        std::vector<float>(static_cast<std::size_t>(shape.k * shape.n)),
                        std::vector<float>(static_cast<std::size_t>(shape.m * shape.n))};
  for (std::size_t i = 0; i < operands.a.size(); ++i) operands.a[i] = static_cast<float>(i % 17) * 0.0625F - 0.5F;
  for (std::size_t i = 0; i < operands.b.size(); ++i) operands.b[i] = static_cast<float>(i % 13) * 0.0625F - 0.375F;
  return operands;
}

// C = op(A) op(B), row-major with explicit leading dimensions, one raw call on the calling thread's library
// settings: oneDNN's dnnl_sgemm (its OpenMP team is the calling thread's, set to one thread) or OpenBLAS's
// cblas_sgemm (on however many threads OpenBLAS is set to).
inline void strided_sgemm(bool onednn, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                          std::int64_t k, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                          std::int64_t ldc) {
  if (onednn) {
    omp_set_num_threads(1);
    dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, 1.0F, a, lda, b, ldb, 0.0F, c, ldc);
  } else {
    cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0F, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), 0.0F, c, static_cast<int>(ldc));
  }
}

// One contiguous product of `shape` (as ops::matmul_into asks the BLAS for it) through `onednn`'s library.
inline void contiguous_sgemm(bool onednn, const GemmCase& shape, const float* a, const float* b, float* c) {
  strided_sgemm(onednn, shape.transpose_a, shape.transpose_b, shape.m, shape.n, shape.k, a,
                shape.transpose_a ? shape.m : shape.k, b, shape.transpose_b ? shape.k : shape.n, c, shape.n);
}

// One raw cblas_sgemm of `shape`, on however many threads OpenBLAS is set to.
inline void raw_sgemm(const GemmCase& shape, const float* a, const float* b, float* c) {
  contiguous_sgemm(false, shape, a, b, c);
}

// The same product through oneDNN's row-major dnnl_sgemm on one thread: the library `--gemm onednn` selects.
inline void raw_onednn_sgemm(const GemmCase& shape, const float* a, const float* b, float* c) {
  contiguous_sgemm(true, shape, a, b, c);
}

}  // namespace tp::bench

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

// One raw cblas_sgemm of `shape` (C = op(A) op(B), row-major, as ops::matmul_into asks the BLAS for it), on
// however many threads OpenBLAS is set to.
inline void raw_sgemm(const GemmCase& shape, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, shape.transpose_a ? CblasTrans : CblasNoTrans,
              shape.transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(shape.m), static_cast<int>(shape.n),
              static_cast<int>(shape.k), 1.0F, a, static_cast<int>(shape.transpose_a ? shape.m : shape.k), b,
              static_cast<int>(shape.transpose_b ? shape.k : shape.n), 0.0F, c, static_cast<int>(shape.n));
}

// The same product through oneDNN's row-major dnnl_sgemm on one thread (its OpenMP team is the calling
// thread's): the library `--gemm onednn` selects.
inline void raw_onednn_sgemm(const GemmCase& shape, const float* a, const float* b, float* c) {
  omp_set_num_threads(1);
  dnnl_sgemm(shape.transpose_a ? 'T' : 'N', shape.transpose_b ? 'T' : 'N', shape.m, shape.n, shape.k, 1.0F, a,
             shape.transpose_a ? shape.m : shape.k, b, shape.transpose_b ? shape.k : shape.n, 0.0F, c, shape.n);
}

}  // namespace tp::bench

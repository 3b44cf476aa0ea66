// SPDX-License-Identifier: Apache-2.0
// A plain product for the shapes and alignments cuBLASLt's heuristic has no algorithm for (cuda_matmul.cpp
// falls back to it): one thread per output element, the k products summed in order in float (f32, f16, bf16:
// operands widened exactly) or double (f64), rounded once to the output dtype. Slow and obviously correct.
#include "backend/cuda/kernels/device_common.cuh"

namespace tp::backend::cuda::kernels {
namespace {

template <typename S>
__global__ void matmul_kernel(const S* a, const S* b, S* out, bool transpose_a, bool transpose_b, std::int64_t m,
                              std::int64_t n, std::int64_t k) {
  TP_GRID_STRIDE(index, m * n) {
    const std::int64_t row = index / n;
    const std::int64_t col = index % n;
    Compute<S> sum{0};
    for (std::int64_t p = 0; p < k; ++p) {
      const Compute<S> left = load(a, transpose_a ? p * m + row : row * k + p);
      const Compute<S> right = load(b, transpose_b ? col * k + p : p * n + col);
      sum = add_rn(sum, mul_rn(left, right));
    }
    store(out, index, sum);
  }
}

}  // namespace

cudaError_t launch_matmul_fallback(Dtype dtype, bool transpose_a, bool transpose_b, const void* a, const void* b,
                                   void* out, std::int64_t m, std::int64_t n, std::int64_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  return with_float_storage(dtype, [&](auto* tag) {
    using S = TP_TYPE_OF(tag);
    matmul_kernel<S><<<grid_blocks(m * n), kThreads, 0, stream>>>(
        static_cast<const S*>(a), static_cast<const S*>(b), static_cast<S*>(out), transpose_a, transpose_b, m, n, k);
    return launched();
  });
}

}  // namespace tp::backend::cuda::kernels

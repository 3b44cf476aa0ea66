// SPDX-License-Identifier: Apache-2.0
// Element-wise kernels of the CUDA backend: arithmetic, scale, add_scaled and the peers' sum, broadcasts,
// activations, bias, all-finite and fill. Semantics: the CPU kernels (backend/cpu/kernels/elementwise.hpp,
// activations.hpp, bias.hpp, broadcast.hpp, finite.hpp), as the OpenCL backend's elementwise.cl follows them.
// Each kernel is a grid-stride loop (geometry.cuh).
#include "backend/cuda/kernels/device_common.cuh"

namespace tp::backend::cuda::kernels {
namespace {

template <typename T>
__device__ inline T apply(int op, T a, T b) {
  // Intrinsics with an explicit rounding mode are never contracted into fused multiply-adds.
  if constexpr (sizeof(T) == sizeof(float)) {
    return op == 0 ? __fadd_rn(a, b) : op == 1 ? __fsub_rn(a, b) : op == 2 ? __fmul_rn(a, b) : __fdiv_rn(a, b);
  } else {
    return op == 0 ? __dadd_rn(a, b) : op == 1 ? __dsub_rn(a, b) : op == 2 ? __dmul_rn(a, b) : __ddiv_rn(a, b);
  }
}

template <typename T>
__global__ void binary_kernel(int op, int broadcast, const T* x, const T* y, T* out, std::int64_t n,
                              std::int64_t cols) {
  TP_GRID_STRIDE(i, n) {
    const T b = broadcast == 0 ? y[i] : broadcast == 1 ? y[i % cols] : y[0];
    out[i] = apply(op, x[i], b);
  }
}

template <typename T>
__global__ void scale_kernel(const T* x, T alpha, T* out, std::int64_t n) {
  TP_GRID_STRIDE(i, n) { out[i] = apply(2, x[i], alpha); }
}

// y + alpha * x, with one multiplication and one addition, each rounded (the CPU's plain arithmetic).
template <typename S>
__global__ void add_scaled_kernel(S* y, Compute<S> alpha, const S* x, std::int64_t n) {
  TP_GRID_STRIDE(i, n) { store(y, i, apply(0, load(y, i), apply(2, alpha, load(x, i)))); }
}

template <typename S>
__global__ void peer_sum_kernel(S* out, PeerSumInputs inputs, int count, std::int64_t n) {
  TP_GRID_STRIDE(i, n) {
    Compute<S> sum = load(static_cast<const S*>(inputs.inputs[0]), i);
    for (int k = 1; k < count; ++k) {
      sum = round_to<S>(apply(0, sum, load(static_cast<const S*>(inputs.inputs[k]), i)));
    }
    store(out, i, sum);
  }
}

template <typename T>
__global__ void broadcast_axis_kernel(const T* x, T* out, std::int64_t axis, std::int64_t inner, T alpha,
                                      std::int64_t n) {
  TP_GRID_STRIDE(j, n) {
    const std::int64_t o = j / (axis * inner);
    const T value = x[o * inner + j % inner];
    out[j] = alpha == T{1} ? value : apply(2, alpha, value);
  }
}

template <typename T>
__global__ void scale_rows_kernel(const T* x, const T* s, T* out, std::int64_t cols, std::int64_t n) {
  TP_GRID_STRIDE(i, n) { out[i] = apply(2, x[i], s[i / cols]); }
}

template <typename S>
__global__ void relu_kernel(const S* x, S* out, std::int64_t n) {
  TP_GRID_STRIDE(i, n) {
    const Compute<S> value = load(x, i);
    store(out, i, value <= Compute<S>{0} ? Compute<S>{0} : value);
  }
}

template <typename S>
__global__ void relu_grad_kernel(const S* dy, const S* x, S* dx, std::int64_t n) {
  TP_GRID_STRIDE(i, n) {
    const Compute<S> gate = load(x, i);
    store(dx, i, gate > Compute<S>{0} ? load(dy, i) : Compute<S>{0});
  }
}

template <typename S>
__global__ void bias_add_kernel(const S* x, const S* bias, S* out, std::int64_t cols, std::int64_t n) {
  TP_GRID_STRIDE(i, n) { store(out, i, apply(0, load(x, i), load(bias, i % cols))); }
}

// One thread per column sums the rows in order in double: deterministic, coalesced across the columns.
template <typename S>
__global__ void bias_add_grad_kernel(const S* dy, S* dbias, std::int64_t rows, std::int64_t cols) {
  TP_GRID_STRIDE(c, cols) {
    double sum = 0;
    for (std::int64_t r = 0; r < rows; ++r) sum = __dadd_rn(sum, static_cast<double>(load(dy, r * cols + c)));
    store(dbias, c, static_cast<Compute<S>>(sum));
  }
}

// out[0] = 1 first (one thread), then every thread that finds an element whose exponent bits are all ones
// (Inf or NaN) in its stride stores 0: all writers store the same value, so the verdict does not depend on
// their order.
__global__ void set_one_kernel(float* out) { out[0] = 1.0F; }

template <typename Bits>
__global__ void all_finite_kernel(const Bits* x, Bits exponent, float* out, std::int64_t n) {
  bool special = false;
  TP_GRID_STRIDE(i, n) { special = special || (x[i] & exponent) == exponent; }
  if (special) out[0] = 0.0F;
}

template <typename T>
__global__ void fill_kernel(T* out, T value, std::int64_t n) {
  TP_GRID_STRIDE(i, n) { out[i] = value; }
}

}  // namespace

cudaError_t launch_binary(Dtype dtype, int op, int broadcast, const void* x, const void* y, void* out, std::int64_t n,
                          std::int64_t cols, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    binary_kernel<T><<<grid_blocks(n), kThreads, 0, stream>>>(op, broadcast, static_cast<const T*>(x),
                                                              static_cast<const T*>(y), static_cast<T*>(out), n,
                                                              cols > 0 ? cols : 1);
    return launched();
  });
}

cudaError_t launch_scale(Dtype dtype, const void* x, double alpha, void* out, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    scale_kernel<T><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T>(alpha),
                                                             static_cast<T*>(out), n);
    return launched();
  });
}

cudaError_t launch_add_scaled(Dtype dtype, void* y, double alpha, const void* x, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_float_storage(dtype, [&](auto* tag) {
    using S = TP_TYPE_OF(tag);
    add_scaled_kernel<S><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<S*>(y), static_cast<Compute<S>>(alpha),
                                                                  static_cast<const S*>(x), n);
    return launched();
  });
}

cudaError_t launch_peer_sum(Dtype dtype, void* out, const PeerSumInputs& inputs, int count, std::int64_t n,
                            cudaStream_t stream) {
  if (n <= 0 || count <= 0) return cudaSuccess;
  if (count > kPeerSumInputs) return cudaErrorInvalidValue;
  return with_float_storage(dtype, [&](auto* tag) {
    using S = TP_TYPE_OF(tag);
    peer_sum_kernel<S><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<S*>(out), inputs, count, n);
    return launched();
  });
}

cudaError_t launch_broadcast_axis(Dtype dtype, const void* x, void* out, std::int64_t axis, std::int64_t inner,
                                  double alpha, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    broadcast_axis_kernel<T><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(out),
                                                                      axis, inner, static_cast<T>(alpha), n);
    return launched();
  });
}

cudaError_t launch_scale_rows(Dtype dtype, const void* x, const void* s, void* out, std::int64_t cols, std::int64_t n,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    scale_rows_kernel<T><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(s),
                                                                  static_cast<T*>(out), cols, n);
    return launched();
  });
}

cudaError_t launch_relu(Dtype dtype, const void* x, void* out, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_float_storage(dtype, [&](auto* tag) {
    using S = TP_TYPE_OF(tag);
    relu_kernel<S><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<const S*>(x), static_cast<S*>(out), n);
    return launched();
  });
}

cudaError_t launch_relu_grad(Dtype dtype, const void* dy, const void* x, void* dx, std::int64_t n,
                             cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_float_storage(dtype, [&](auto* tag) {
    using S = TP_TYPE_OF(tag);
    relu_grad_kernel<S><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<const S*>(dy), static_cast<const S*>(x),
                                                                 static_cast<S*>(dx), n);
    return launched();
  });
}

cudaError_t launch_bias_add(Dtype dtype, const void* x, const void* bias, void* out, std::int64_t cols, std::int64_t n,
                            cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_float_storage(dtype, [&](auto* tag) {
    using S = TP_TYPE_OF(tag);
    bias_add_kernel<S><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<const S*>(x), static_cast<const S*>(bias),
                                                                static_cast<S*>(out), cols > 0 ? cols : 1, n);
    return launched();
  });
}

cudaError_t launch_bias_add_grad(Dtype dtype, const void* dy, void* dbias, std::int64_t rows, std::int64_t cols,
                                 cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  return with_float_storage(dtype, [&](auto* tag) {
    using S = TP_TYPE_OF(tag);
    bias_add_grad_kernel<S>
        <<<grid_blocks(cols), kThreads, 0, stream>>>(static_cast<const S*>(dy), static_cast<S*>(dbias), rows, cols);
    return launched();
  });
}

cudaError_t launch_all_finite(Dtype dtype, const void* x, float* out, std::int64_t n, cudaStream_t stream) {
  set_one_kernel<<<1, 1, 0, stream>>>(out);
  if (const cudaError_t status = launched(); status != cudaSuccess || n <= 0) return status;
  switch (dtype) {
    case Dtype::f16:
    case Dtype::bf16:
      all_finite_kernel<std::uint16_t><<<grid_blocks(n), kThreads, 0, stream>>>(
          static_cast<const std::uint16_t*>(x), static_cast<std::uint16_t>(dtype == Dtype::f16 ? 0x7C00U : 0x7F80U),
          out, n);
      return launched();
    case Dtype::f32:
      all_finite_kernel<std::uint32_t>
          <<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<const std::uint32_t*>(x), 0x7F800000U, out, n);
      return launched();
    case Dtype::f64:
      all_finite_kernel<std::uint64_t><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<const std::uint64_t*>(x),
                                                                                0x7FF0000000000000ULL, out, n);
      return launched();
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_fill(Dtype dtype, void* out, double value, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    fill_kernel<T><<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<T>(value), n);
    return launched();
  });
}

}  // namespace tp::backend::cuda::kernels

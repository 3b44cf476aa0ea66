// SPDX-License-Identifier: Apache-2.0
// In-place optimizer updates with the Keras semantics of backend/cpu/kernels/optimizer.hpp and
// scaled_optimizer.hpp: parameters and slots of T (f32, f64), the gradient of T or, for f32 parameters, float16 /
// bfloat16 widened exactly as it is read; and Adam on the sum of several replicas' gradients read in place
// (adam_update_summed), with its results copied into mirrors; and the multi-tensor forms of SGD and Adam, one
// launch over a table of entries.
//
// apply (a float32 scalar on the device, written earlier in the same step) is read when the kernel runs: 0
// leaves the parameter and every slot untouched; any other value multiplies the gradient (null: 1). Every
// operation is rounded as the CPU's (no fused multiply-adds).
#include "backend/cuda/kernels/device_common.cuh"

namespace tp::backend::cuda::kernels {
namespace {

__device__ inline float apply_factor(const float* apply) { return apply != nullptr ? apply[0] : 1.0F; }

// g = T(grad) * factor (x 1 is exact).
template <typename T, typename G>
__device__ inline T scaled_gradient(const G* grad, std::int64_t i, float factor) {
  return mul_rn(static_cast<T>(load(grad, i)), static_cast<T>(factor));
}

// One parameter's SGD step on gradient g (optimizer.cpp's sgd_loop): without velocity param -= lr g; with it
// velocity = momentum velocity - lr g, then param += velocity (Nesterov: momentum velocity - lr g).
template <typename T>
__device__ inline void sgd_element(T g, T* param, T* velocity, std::int64_t i, T lr, T momentum, bool nesterov) {
  if (velocity == nullptr) {
    param[i] = sub_rn(param[i], mul_rn(lr, g));
    return;
  }
  const T updated = sub_rn(mul_rn(momentum, velocity[i]), mul_rn(lr, g));
  velocity[i] = updated;
  param[i] = add_rn(param[i], nesterov ? sub_rn(mul_rn(momentum, updated), mul_rn(lr, g)) : updated);
}

template <typename T, typename G>
__global__ void sgd_kernel(const float* apply, T* param, const G* grad, T* velocity, T lr, T momentum, bool nesterov,
                           std::int64_t n) {
  const float factor = apply_factor(apply);
  if (factor == 0.0F) return;
  TP_GRID_STRIDE(i, n) { sgd_element(scaled_gradient<T>(grad, i, factor), param, velocity, i, lr, momentum, nesterov); }
}

// One parameter's Adam step on gradient g (optimizer.cpp's adam_element):
// m += (g - m) (1 - beta1); v += (g g - v) (1 - beta2); param -= m alpha / (sqrt(v) + epsilon).
template <typename T>
__device__ inline void adam_element(T g, T* param, T* m, T* v, std::int64_t i, T alpha, T one_minus_beta1,
                                    T one_minus_beta2, T epsilon) {
  const T m_new = add_rn(m[i], mul_rn(sub_rn(g, m[i]), one_minus_beta1));
  const T v_new = add_rn(v[i], mul_rn(sub_rn(mul_rn(g, g), v[i]), one_minus_beta2));
  m[i] = m_new;
  v[i] = v_new;
  param[i] = sub_rn(param[i], div_rn(mul_rn(m_new, alpha), add_rn(sqrt_rn(v_new), epsilon)));
}

template <typename T, typename G>
__global__ void adam_kernel(const float* apply, T* param, const G* grad, T* m, T* v, T alpha, T one_minus_beta1,
                            T one_minus_beta2, T epsilon, std::int64_t n) {
  const float factor = apply_factor(apply);
  if (factor == 0.0F) return;
  TP_GRID_STRIDE(i, n) {
    adam_element(scaled_gradient<T>(grad, i, factor), param, m, v, i, alpha, one_minus_beta1, one_minus_beta2, epsilon);
  }
}

// The sum grads[0] + grads[1] + ..., each addition rounded to T (add_scaled(sum, 1, grad): 1 * x is exact), then
// adam_element; then the element's param, m, v copied into the mirrors.
template <typename T>
__global__ void adam_summed_kernel(T* param, PeerSumInputs grads, int count, T* m, T* v, AdamMirrorPointers mirrors,
                                   int mirror_count, T alpha, T one_minus_beta1, T one_minus_beta2, T epsilon,
                                   std::int64_t n) {
  TP_GRID_STRIDE(i, n) {
    T g = static_cast<const T*>(grads.inputs[0])[i];
    for (int k = 1; k < count; ++k) g = add_rn(g, static_cast<const T*>(grads.inputs[k])[i]);
    adam_element(g, param, m, v, i, alpha, one_minus_beta1, one_minus_beta2, epsilon);
    for (int k = 0; k < mirror_count; ++k) {
      static_cast<T*>(mirrors.param[k])[i] = param[i];
      if (mirrors.m[k] == nullptr) continue;  // sharded slots: the parameter only
      static_cast<T*>(mirrors.m[k])[i] = m[i];
      static_cast<T*>(mirrors.v[k])[i] = v[i];
    }
  }
}

// sgd_kernel and adam_kernel (no flag, G = T) over a table's entries: blockIdx.y is the entry.
template <typename T>
__global__ void sgd_multi_kernel(SgdMultiTable table, T lr, T momentum, bool nesterov) {
  const int entry = static_cast<int>(blockIdx.y);
  auto* param = static_cast<T*>(table.param[entry]);
  const auto* grad = static_cast<const T*>(table.grad[entry]);
  auto* velocity = static_cast<T*>(table.velocity[entry]);
  TP_GRID_STRIDE(i, table.n[entry]) { sgd_element(grad[i], param, velocity, i, lr, momentum, nesterov); }
}

template <typename T>
__global__ void adam_multi_kernel(AdamMultiTable table, T alpha, T one_minus_beta1, T one_minus_beta2, T epsilon) {
  const int entry = static_cast<int>(blockIdx.y);
  const auto* grad = static_cast<const T*>(table.grad[entry]);
  TP_GRID_STRIDE(i, table.n[entry]) {
    adam_element(grad[i], static_cast<T*>(table.param[entry]), static_cast<T*>(table.m[entry]),
                 static_cast<T*>(table.v[entry]), i, alpha, one_minus_beta1, one_minus_beta2, epsilon);
  }
}

// The x blocks of a multi-tensor launch: enough for its longest entry.
template <typename Table>
dim3 multi_grid(const Table& table, int count) {
  std::int64_t longest = 0;
  for (int k = 0; k < count; ++k) longest = table.n[k] > longest ? table.n[k] : longest;
  return dim3(grid_blocks(longest), static_cast<unsigned>(count));
}

// Calls body(T*, G*) for the (parameter, gradient) pairs the optimizers take.
template <typename Body>
cudaError_t with_optimizer_types(Dtype param, Dtype grad, Body body) {
  if (param == Dtype::f64 && grad == Dtype::f64)
    return body(static_cast<double*>(nullptr), static_cast<double*>(nullptr));
  if (param != Dtype::f32) return cudaErrorInvalidValue;
  switch (grad) {
    case Dtype::f32: return body(static_cast<float*>(nullptr), static_cast<float*>(nullptr));
    case Dtype::f16: return body(static_cast<float*>(nullptr), static_cast<__half*>(nullptr));
    case Dtype::bf16: return body(static_cast<float*>(nullptr), static_cast<Bf16*>(nullptr));
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_sgd(Dtype param_dtype, Dtype grad_dtype, const float* apply, void* param, const void* grad,
                       void* velocity, const SgdHyper& hyper, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_optimizer_types(param_dtype, grad_dtype, [&](auto* param_tag, auto* grad_tag) {
    using T = TP_TYPE_OF(param_tag);
    using G = TP_TYPE_OF(grad_tag);
    sgd_kernel<T, G><<<grid_blocks(n), kThreads, 0, stream>>>(
        apply, static_cast<T*>(param), static_cast<const G*>(grad), static_cast<T*>(velocity), static_cast<T>(hyper.lr),
        static_cast<T>(hyper.momentum), hyper.nesterov, n);
    return launched();
  });
}

cudaError_t launch_adam(Dtype param_dtype, Dtype grad_dtype, const float* apply, void* param, const void* grad, void* m,
                        void* v, const AdamHyper& hyper, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return with_optimizer_types(param_dtype, grad_dtype, [&](auto* param_tag, auto* grad_tag) {
    using T = TP_TYPE_OF(param_tag);
    using G = TP_TYPE_OF(grad_tag);
    adam_kernel<T, G><<<grid_blocks(n), kThreads, 0, stream>>>(
        apply, static_cast<T*>(param), static_cast<const G*>(grad), static_cast<T*>(m), static_cast<T*>(v),
        static_cast<T>(hyper.alpha), static_cast<T>(hyper.one_minus_beta1), static_cast<T>(hyper.one_minus_beta2),
        static_cast<T>(hyper.epsilon), n);
    return launched();
  });
}

cudaError_t launch_adam_summed(Dtype dtype, void* param, const PeerSumInputs& grads, int count, void* m, void* v,
                               const AdamMirrorPointers& mirrors, int mirror_count, const AdamHyper& hyper,
                               std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (count < 1 || count > kPeerSumInputs || mirror_count < 0 || mirror_count > kAdamMirrors) {
    return cudaErrorInvalidValue;
  }
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    adam_summed_kernel<T><<<grid_blocks(n), kThreads, 0, stream>>>(
        static_cast<T*>(param), grads, count, static_cast<T*>(m), static_cast<T*>(v), mirrors, mirror_count,
        static_cast<T>(hyper.alpha), static_cast<T>(hyper.one_minus_beta1), static_cast<T>(hyper.one_minus_beta2),
        static_cast<T>(hyper.epsilon), n);
    return launched();
  });
}

cudaError_t launch_sgd_multi(Dtype dtype, const SgdMultiTable& table, int count, const SgdHyper& hyper,
                             cudaStream_t stream) {
  if (count < 0 || count > kMultiTensorEntries) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    sgd_multi_kernel<T><<<multi_grid(table, count), kThreads, 0, stream>>>(
        table, static_cast<T>(hyper.lr), static_cast<T>(hyper.momentum), hyper.nesterov);
    return launched();
  });
}

cudaError_t launch_adam_multi(Dtype dtype, const AdamMultiTable& table, int count, const AdamHyper& hyper,
                              cudaStream_t stream) {
  if (count < 0 || count > kMultiTensorEntries) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  return with_wide_float(dtype, [&](auto* tag) {
    using T = TP_TYPE_OF(tag);
    adam_multi_kernel<T><<<multi_grid(table, count), kThreads, 0, stream>>>(
        table, static_cast<T>(hyper.alpha), static_cast<T>(hyper.one_minus_beta1),
        static_cast<T>(hyper.one_minus_beta2), static_cast<T>(hyper.epsilon));
    return launched();
  });
}

}  // namespace tp::backend::cuda::kernels

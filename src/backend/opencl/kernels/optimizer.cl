// SPDX-License-Identifier: Apache-2.0
// In-place optimizer updates (OpenCL C 1.2) with the Keras semantics of backend/cpu/kernels/optimizer.hpp and
// scaled_optimizer.hpp: parameters and slots of T (f32, f64), the gradient of T or, for f32 parameters, float16 /
// bfloat16 widened exactly as it is read.
//
// The apply flag (a float32 scalar on the device, written earlier in the same step) is read when the kernel
// runs: 0 leaves the parameter and every slot untouched; any other value multiplies the gradient (1 without a
// flag: has_apply == 0). Hyperparameters arrive already in T, computed on the host as the CPU kernels compute
// them (Adam's alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t) in double, then rounded to T).

#define GRAD_f32 float
#define GRAD_f64 double
#define GRAD_f16 half
#define GRAD_bf16 ushort
#define LOAD_f32(p, i) ((p)[i])
#define LOAD_f64(p, i) ((p)[i])
#define LOAD_f16(p, i) vload_half((i), (p))
#define LOAD_bf16(p, i) bf16_to_float((p)[i])

#define OPTIMIZER_KERNELS(T, G)                                                                                        \
  /* g = T(grad) * factor; no velocity: param -= lr * g; else velocity = momentum * velocity - lr * g and */           \
  /* param += velocity (classic) or momentum * velocity - lr * g (nesterov, with the updated velocity). */             \
  __kernel void sgd_##T##_##G(__global const float* apply, ulong apply_offset, uint has_apply,                         \
                              __global T* param, ulong param_offset, __global const GRAD_##G* grad,                    \
                              ulong grad_offset, __global T* velocity, ulong velocity_offset, uint has_velocity,       \
                              T lr, T momentum, uint nesterov, ulong n) {                                              \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    const float factor = has_apply != 0u ? TP_AT(const float, apply, apply_offset)[0] : 1.0f;                          \
    if (factor == 0.0f) return;                                                                                        \
    const T g = (T)LOAD_##G(TP_AT(const GRAD_##G, grad, grad_offset), i) * (T)factor;                                  \
    __global T* p = TP_AT(T, param, param_offset);                                                                     \
    if (has_velocity == 0u) {                                                                                          \
      p[i] -= lr * g;                                                                                                  \
      return;                                                                                                          \
    }                                                                                                                  \
    __global T* slot = TP_AT(T, velocity, velocity_offset);                                                            \
    const T updated = momentum * slot[i] - lr * g;                                                                     \
    slot[i] = updated;                                                                                                 \
    p[i] += nesterov != 0u ? momentum * updated - lr * g : updated;                                                    \
  }                                                                                                                    \
  /* m += (g - m) * (1 - beta1); v += (g * g - v) * (1 - beta2); param -= m * alpha / (sqrt(v) + epsilon). */          \
  __kernel void adam_##T##_##G(__global const float* apply, ulong apply_offset, uint has_apply,                        \
                               __global T* param, ulong param_offset, __global const GRAD_##G* grad,                   \
                               ulong grad_offset, __global T* m, ulong m_offset, __global T* v, ulong v_offset,        \
                               T alpha, T one_minus_beta1, T one_minus_beta2, T epsilon, ulong n) {                    \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    const float factor = has_apply != 0u ? TP_AT(const float, apply, apply_offset)[0] : 1.0f;                          \
    if (factor == 0.0f) return;                                                                                        \
    const T g = (T)LOAD_##G(TP_AT(const GRAD_##G, grad, grad_offset), i) * (T)factor;                                  \
    __global T* first = TP_AT(T, m, m_offset);                                                                         \
    __global T* second = TP_AT(T, v, v_offset);                                                                        \
    const T m_i = first[i] + (g - first[i]) * one_minus_beta1;                                                         \
    const T v_i = second[i] + (g * g - second[i]) * one_minus_beta2;                                                   \
    first[i] = m_i;                                                                                                    \
    second[i] = v_i;                                                                                                   \
    TP_AT(T, param, param_offset)[i] -= m_i * alpha / (sqrt(v_i) + epsilon);                                           \
  }

OPTIMIZER_KERNELS(float, f32)
OPTIMIZER_KERNELS(float, f16)
OPTIMIZER_KERNELS(float, bf16)
#ifdef TP_FP64
OPTIMIZER_KERNELS(double, f64)
#endif

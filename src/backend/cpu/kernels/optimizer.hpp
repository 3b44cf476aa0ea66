// SPDX-License-Identifier: Apache-2.0
#pragma once
// In-place optimizer updates of one parameter buffer, with Keras semantics (Keras 2.11+ / Keras 3).
//
// SGD, with g = grad:
//   velocity == nullptr (momentum must be 0):  param -= lr * g
//   otherwise:  velocity = momentum * velocity - lr * g
//               param += velocity                                   (classic)
//               param += momentum * velocity - lr * g               (nesterov, with the updated velocity)
//
// Adam, at step t >= 1 (the 1-based count of updates, including this one):
//   alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t)                  (computed once, in double)
//   m    += (g - m) * (1 - beta1)
//   v    += (g * g - v) * (1 - beta2)
//   param -= m * alpha / (sqrt(v) + epsilon)
// Elementwise arithmetic runs in T, as Keras does in the variable's dtype. Keras's defaults are the k*
// constants below. All buffers hold n elements and must not overlap. Bad hyperparameters a kernel can see
// (step < 1, beta outside [0, 1), negative epsilon, momentum != 0 without a velocity buffer) throw
// tp::InvalidArgument naming the argument and value.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "backend/cpu/kernels/check.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {

inline constexpr double kAdamLearningRate = 1e-3;
inline constexpr double kAdamBeta1 = 0.9;
inline constexpr double kAdamBeta2 = 0.999;
inline constexpr double kAdamEpsilon = 1e-7;
inline constexpr double kSgdLearningRate = 1e-2;

template <typename T>
void sgd_update(T* param, const T* grad, T* velocity, std::int64_t n, T lr, T momentum, bool nesterov);

template <typename T>
void adam_update(T* param, const T* grad, T* m, T* v, std::int64_t n, T lr, T beta1, T beta2, T epsilon,
                 std::int64_t step);

// Adam's scalars for one step, checked once: the step size with the bias corrections folded in (computed in
// double, as adam_update computes it) and 1 - beta1, 1 - beta2.
template <typename T>
struct AdamStep {
  T alpha;
  T one_minus_beta1;
  T one_minus_beta2;
  T epsilon;
};

// Checks the hyperparameters as adam_update does (tp::InvalidArgument naming `kernel` and the argument) and
// returns the step's scalars.
template <typename T>
AdamStep<T> adam_step(std::string_view kernel, T lr, T beta1, T beta2, T epsilon, std::int64_t step);

// adam_update's element loop on the calling thread, over n elements, with the scalars of adam_step: bitwise
// adam_update's result, nothing checked and nothing thrown, for blocks that already run on the intra-op threads.
template <typename T>
void adam_apply(const AdamStep<T>& scalars, T* param, const T* grad, T* m, T* v, std::int64_t n) noexcept;

// Where a mirrored replica's update is also stored (adam_update_summed): n elements each, overlapping nothing
// the update reads or writes; m and v both null for a mirror of the parameter only.
template <typename T>
struct AdamMirror {
  T* param;
  T* m;
  T* v;
};

// Copies elements [offset, offset + length) of param, m and v into each mirror (m and v only where the mirror
// has them): the summed updates' copies into the other replicas, block by block while the block is in cache.
template <typename T>
void copy_to_mirrors(std::span<const AdamMirror<T>> mirrors, const T* param, const T* m, const T* v,
                     std::int64_t offset, std::int64_t length) noexcept;

// Adam with g = grads[0] + grads[1] + ... + grads[count - 1], added left to right in blocks, each addition
// rounded as add_scaled(sum, 1, grads[k]) rounds it: the update of a mirrored replica that reads every
// replica's gradient in place instead of an all-reduced copy (ops::adam_update_across_peers). The sum and the
// update are bitwise those of the separate sum (SumAcrossPeers) followed by adam_update. count >= 1; no grads
// buffer overlaps param, m or v. With `mirrors`, the updated param, m and v are also copied into each mirror
// block by block, while the block is in cache: replicas splitting a parameter's elements each update their
// range once, for all.
template <typename T>
void adam_update_summed(T* param, const T* const* grads, std::size_t count, T* m, T* v, std::int64_t n, T lr, T beta1,
                        T beta2, T epsilon, std::int64_t step, std::span<const AdamMirror<T>> mirrors = {});

// The buffers of a summed update (adam_update_summed, adam_update_summed_half): n >= 0, count >= 1 gradients, and
// every buffer and mirror non-null for n elements; tp::InvalidArgument naming `kernel` and the argument
// otherwise. A mirror of the parameter only (m and v null) is not asked for m and v.
template <typename T, typename G>
void check_summed_update(std::string_view kernel, const T* param, const G* const* grads, std::size_t count, const T* m,
                         const T* v, std::int64_t n, std::span<const AdamMirror<T>> mirrors) {
  detail::check_size(kernel, "n", n);
  if (count == 0 || grads == nullptr) {
    TP_THROW(InvalidArgument, detail::kComponent, kernel, ": no gradients to sum (count = ", count, ")");
  }
  detail::check_pointer(kernel, "param", param, n);
  for (std::size_t index = 0; index < count; ++index) detail::check_pointer(kernel, "grads[k]", grads[index], n);
  detail::check_pointer(kernel, "m", m, n);
  detail::check_pointer(kernel, "v", v, n);
  for (const AdamMirror<T>& mirror : mirrors) {
    detail::check_pointer(kernel, "mirror.param", mirror.param, n);
    if (mirror.m == nullptr && mirror.v == nullptr) continue;  // the parameter only
    detail::check_pointer(kernel, "mirror.m", mirror.m, n);
    detail::check_pointer(kernel, "mirror.v", mirror.v, n);
  }
}

// One entry of the multi-tensor updates: n elements of each buffer (velocity null for SGD without momentum).
template <typename T>
struct SgdTensors {
  T* param;
  const T* grad;
  T* velocity;
  std::int64_t n;
};
template <typename T>
struct AdamTensors {
  T* param;
  const T* grad;
  T* m;
  T* v;
  std::int64_t n;
};

// sgd_update / adam_update on every entry, as one loop over the entries' elements laid end to end and split
// over the intra-op threads in one parallel_for: each element is computed by the single update's expressions,
// so the results are bitwise those of the single updates, for any thread count. No buffer an entry writes
// overlaps another entry's buffers (gradients may share one).
template <typename T>
void sgd_update_multi(std::span<const SgdTensors<T>> tensors, T lr, T momentum, bool nesterov);
template <typename T>
void adam_update_multi(std::span<const AdamTensors<T>> tensors, T lr, T beta1, T beta2, T epsilon, std::int64_t step);

extern template void sgd_update<float>(float*, const float*, float*, std::int64_t, float, float, bool);
extern template void sgd_update<double>(double*, const double*, double*, std::int64_t, double, double, bool);
extern template void adam_update<float>(float*, const float*, float*, float*, std::int64_t, float, float, float, float,
                                        std::int64_t);
extern template void adam_update<double>(double*, const double*, double*, double*, std::int64_t, double, double, double,
                                         double, std::int64_t);

extern template void adam_update_summed<float>(float*, const float* const*, std::size_t, float*, float*, std::int64_t,
                                               float, float, float, float, std::int64_t,
                                               std::span<const AdamMirror<float>>);
extern template void adam_update_summed<double>(double*, const double* const*, std::size_t, double*, double*,
                                                std::int64_t, double, double, double, double, std::int64_t,
                                                std::span<const AdamMirror<double>>);
extern template void sgd_update_multi<float>(std::span<const SgdTensors<float>>, float, float, bool);
extern template void sgd_update_multi<double>(std::span<const SgdTensors<double>>, double, double, bool);
extern template void adam_update_multi<float>(std::span<const AdamTensors<float>>, float, float, float, float,
                                              std::int64_t);
extern template void adam_update_multi<double>(std::span<const AdamTensors<double>>, double, double, double, double,
                                               std::int64_t);

}  // namespace tp::backend::cpu

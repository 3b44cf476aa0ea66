// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/optimizer.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string_view>
#include <vector>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/adam_element.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/elementwise.hpp"
#include "backend/cpu/kernels/isa_clones.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {
namespace {

// Parameters per parallel_for chunk: an update costs a square root and a division per element (Adam); a chunk
// must be long against the cost of handing it to a helper thread, and short enough that a large tensor still
// splits over every thread.
constexpr std::int64_t kUpdateGrain = 16384;

template <typename T>
void check_beta(std::string_view name, T beta) {
  if (!(beta >= T{0} && beta < T{1})) {
    TP_THROW(InvalidArgument, detail::kComponent, "adam_update: ", name, " = ", beta, " is outside [0, 1)");
  }
}

// SGD without a velocity buffer (momentum 0).
template <typename T>
TP_ISA_CLONES void sgd_plain_loop(T* __restrict__ param, const T* __restrict__ grad, std::int64_t n, T lr) {
  for (std::int64_t i = 0; i < n; ++i) param[i] -= lr * grad[i];
}

template <typename T>
TP_ISA_CLONES void sgd_loop(T* param, const T* grad, T* velocity, std::int64_t n, T lr, T momentum, bool nesterov) {
  for (std::int64_t i = 0; i < n; ++i) {
    velocity[i] = momentum * velocity[i] - lr * grad[i];
    param[i] += nesterov ? momentum * velocity[i] - lr * grad[i] : velocity[i];
  }
}

using detail::adam_element;

// The four arrays never overlap (distinct tensors); saying so lets the compiler vectorise the loop.
template <typename T>
TP_ISA_CLONES void adam_loop(T* __restrict__ param, const T* __restrict__ grad, T* __restrict__ m, T* __restrict__ v,
                             std::int64_t n, T alpha, T one_minus_beta1, T one_minus_beta2, T epsilon) {
  for (std::int64_t i = 0; i < n; ++i) {
    adam_element(grad[i], param[i], m[i], v[i], alpha, one_minus_beta1, one_minus_beta2, epsilon);
  }
}

// adam_loop on the gradient grad0 + grad1, added as it is read: round(grad0[i] + grad1[i]) is what
// add_scaled(sum = grad0, 1, grad1) stores (1 * x is exact, with or without a fused multiply-add), and the
// update's expressions are adam_loop's, so the bits are those of the sum followed by adam_loop.
template <typename T>
TP_ISA_CLONES void adam_sum2_loop(T* __restrict__ param, const T* __restrict__ grad0, const T* __restrict__ grad1,
                                  T* __restrict__ m, T* __restrict__ v, std::int64_t n, T alpha, T one_minus_beta1,
                                  T one_minus_beta2, T epsilon) {
  for (std::int64_t i = 0; i < n; ++i) {
    adam_element(grad0[i] + grad1[i], param[i], m[i], v[i], alpha, one_minus_beta1, one_minus_beta2, epsilon);
  }
}

// Checks Adam's scalar arguments for `kernel` and returns the step size with the bias corrections folded in,
// computed in double so every kernel variant uses the same rounded value.
template <typename T>
T adam_step_size(std::string_view kernel, std::int64_t n, T lr, T beta1, T beta2, T epsilon, std::int64_t step) {
  detail::check_size(kernel, "n", n);
  if (step < 1) TP_THROW(InvalidArgument, detail::kComponent, kernel, ": step = ", step, " must be >= 1");
  check_beta("beta1", beta1);
  check_beta("beta2", beta2);
  if (!(epsilon >= T{0})) {
    TP_THROW(InvalidArgument, detail::kComponent, kernel, ": epsilon = ", epsilon, " must be >= 0");
  }
  const auto t = static_cast<double>(step);
  const auto b1 = static_cast<double>(beta1);
  const auto b2 = static_cast<double>(beta2);
  return static_cast<T>(static_cast<double>(lr) * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t)));
}

// Runs piece(entry, begin, end) over the entries' elements laid end to end, split over the intra-op threads in
// chunks of kUpdateGrain: each call covers elements [begin, end) of one entry, and every element exactly once.
template <typename Entry, typename Piece>
void for_each_piece(std::span<const Entry> entries, const Piece& piece) {
  std::vector<std::int64_t> starts;  // of each entry, laid end to end; then the total
  starts.reserve(entries.size() + 1);
  std::int64_t total = 0;
  for (const Entry& entry : entries) {
    starts.push_back(total);
    total += entry.n;
  }
  starts.push_back(total);
  parallel_for(total, kUpdateGrain, [&](std::int64_t begin, std::int64_t end) {
    // The last entry starting at or before `begin` (entries of no elements are skipped by the length test).
    auto index =
        static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end() - 1, begin) - starts.begin()) - 1;
    for (; index < entries.size() && starts[index] < end; ++index) {
      const std::int64_t low = std::max(begin, starts[index]) - starts[index];
      const std::int64_t high = std::min(end, starts[index + 1]) - starts[index];
      if (low < high) piece(entries[index], low, high);
    }
  });
}

}  // namespace

template <typename T>
AdamStep<T> adam_step(std::string_view kernel, T lr, T beta1, T beta2, T epsilon, std::int64_t step) {
  return {adam_step_size(kernel, 0, lr, beta1, beta2, epsilon, step), T{1} - beta1, T{1} - beta2, epsilon};
}

template <typename T>
void adam_apply(const AdamStep<T>& scalars, T* param, const T* grad, T* m, T* v, std::int64_t n) noexcept {
  adam_loop(param, grad, m, v, n, scalars.alpha, scalars.one_minus_beta1, scalars.one_minus_beta2, scalars.epsilon);
}

template <typename T>
void copy_to_mirrors(std::span<const AdamMirror<T>> mirrors, const T* param, const T* m, const T* v,
                     std::int64_t offset, std::int64_t length) noexcept {
  const auto bytes = static_cast<std::size_t>(length) * sizeof(T);
  for (const AdamMirror<T>& mirror : mirrors) {
    std::memcpy(mirror.param + offset, param + offset, bytes);
    if (mirror.m == nullptr) continue;
    std::memcpy(mirror.m + offset, m + offset, bytes);
    std::memcpy(mirror.v + offset, v + offset, bytes);
  }
}

template <typename T>
void sgd_update(T* param, const T* grad, T* velocity, std::int64_t n, T lr, T momentum, bool nesterov) {
  constexpr std::string_view kKernel = "sgd_update";
  detail::check_size(kKernel, "n", n);
  if (n == 0) return;  // an empty tensor may have null buffers: nothing to update (the other backends skip it too)
  detail::check_pointer(kKernel, "param", param, n);
  detail::check_pointer(kKernel, "grad", grad, n);
  if (velocity == nullptr) {
    if (momentum != T{0}) {
      TP_THROW(InvalidArgument, detail::kComponent, kKernel, ": momentum = ", momentum,
               " needs a velocity buffer, but velocity is null");
    }
    sgd_plain_loop(param, grad, n, lr);
    return;
  }
  parallel_for(n, kUpdateGrain, [&](std::int64_t begin, std::int64_t end) {
    sgd_loop(param + begin, grad + begin, velocity + begin, end - begin, lr, momentum, nesterov);
  });
}

template <typename T>
void adam_update(T* param, const T* grad, T* m, T* v, std::int64_t n, T lr, T beta1, T beta2, T epsilon,
                 std::int64_t step) {
  constexpr std::string_view kKernel = "adam_update";
  const T alpha = adam_step_size(kKernel, n, lr, beta1, beta2, epsilon, step);
  detail::check_pointer(kKernel, "param", param, n);
  detail::check_pointer(kKernel, "grad", grad, n);
  detail::check_pointer(kKernel, "m", m, n);
  detail::check_pointer(kKernel, "v", v, n);
  parallel_for(n, kUpdateGrain, [&](std::int64_t begin, std::int64_t end) {
    adam_loop(param + begin, grad + begin, m + begin, v + begin, end - begin, alpha, T{1} - beta1, T{1} - beta2,
              epsilon);
  });
}

template <typename T>
void adam_update_summed(T* param, const T* const* grads, std::size_t count, T* m, T* v, std::int64_t n, T lr, T beta1,
                        T beta2, T epsilon, std::int64_t step, std::span<const AdamMirror<T>> mirrors) {
  constexpr std::string_view kKernel = "adam_update_summed";
  check_summed_update(kKernel, param, grads, count, m, v, n, mirrors);
  const T alpha = adam_step_size(kKernel, n, lr, beta1, beta2, epsilon, step);
  const T one_minus_beta1 = T{1} - beta1;
  const T one_minus_beta2 = T{1} - beta2;
  // Blocks of the sum on the stack (as SumAcrossPeers sums, then adam_loop on it) for three or more gradients,
  // and of the mirrors' copies: each block is still in L1 when it is read back.
  constexpr std::int64_t kBlock = 2048;
  parallel_for(n, kUpdateGrain, [&](std::int64_t begin, std::int64_t end) {
    if (count == 2 && mirrors.empty()) {  // two replicas: the sum inside the update's loop, in one pass
      adam_sum2_loop(param + begin, grads[0] + begin, grads[1] + begin, m + begin, v + begin, end - begin, alpha,
                     one_minus_beta1, one_minus_beta2, epsilon);
      return;
    }
    alignas(64) std::array<T, kBlock> sum;
    for (std::int64_t offset = begin; offset < end; offset += kBlock) {
      const std::int64_t length = std::min(kBlock, end - offset);
      if (count == 2) {
        adam_sum2_loop(param + offset, grads[0] + offset, grads[1] + offset, m + offset, v + offset, length, alpha,
                       one_minus_beta1, one_minus_beta2, epsilon);
      } else {
        std::memcpy(sum.data(), grads[0] + offset, static_cast<std::size_t>(length) * sizeof(T));
        for (std::size_t index = 1; index < count; ++index)
          add_scaled<T>(sum.data(), T{1}, grads[index] + offset, length);
        adam_loop(param + offset, sum.data(), m + offset, v + offset, length, alpha, one_minus_beta1, one_minus_beta2,
                  epsilon);
      }
      copy_to_mirrors(mirrors, param, m, v, offset, length);
    }
  });
}

template <typename T>
void sgd_update_multi(std::span<const SgdTensors<T>> tensors, T lr, T momentum, bool nesterov) {
  constexpr std::string_view kKernel = "sgd_update_multi";
  for (const SgdTensors<T>& entry : tensors) {
    detail::check_size(kKernel, "n", entry.n);
    detail::check_pointer(kKernel, "param", entry.param, entry.n);
    detail::check_pointer(kKernel, "grad", entry.grad, entry.n);
    if (entry.velocity == nullptr && momentum != T{0} && entry.n > 0) {  // an empty entry may have no buffers
      TP_THROW(InvalidArgument, detail::kComponent, kKernel, ": momentum = ", momentum,
               " needs a velocity buffer, but an entry's velocity is null");
    }
  }
  for_each_piece(tensors, [&](const SgdTensors<T>& entry, std::int64_t begin, std::int64_t end) {
    if (entry.velocity == nullptr) {
      sgd_plain_loop(entry.param + begin, entry.grad + begin, end - begin, lr);
    } else {
      sgd_loop(entry.param + begin, entry.grad + begin, entry.velocity + begin, end - begin, lr, momentum, nesterov);
    }
  });
}

template <typename T>
void adam_update_multi(std::span<const AdamTensors<T>> tensors, T lr, T beta1, T beta2, T epsilon, std::int64_t step) {
  constexpr std::string_view kKernel = "adam_update_multi";
  const T alpha = adam_step_size(kKernel, 0, lr, beta1, beta2, epsilon, step);
  for (const AdamTensors<T>& entry : tensors) {
    detail::check_size(kKernel, "n", entry.n);
    detail::check_pointer(kKernel, "param", entry.param, entry.n);
    detail::check_pointer(kKernel, "grad", entry.grad, entry.n);
    detail::check_pointer(kKernel, "m", entry.m, entry.n);
    detail::check_pointer(kKernel, "v", entry.v, entry.n);
  }
  for_each_piece(tensors, [&](const AdamTensors<T>& entry, std::int64_t begin, std::int64_t end) {
    adam_loop(entry.param + begin, entry.grad + begin, entry.m + begin, entry.v + begin, end - begin, alpha,
              T{1} - beta1, T{1} - beta2, epsilon);
  });
}

template void sgd_update<float>(float*, const float*, float*, std::int64_t, float, float, bool);
template void sgd_update<double>(double*, const double*, double*, std::int64_t, double, double, bool);
template AdamStep<float> adam_step<float>(std::string_view, float, float, float, float, std::int64_t);
template AdamStep<double> adam_step<double>(std::string_view, double, double, double, double, std::int64_t);
template void adam_apply<float>(const AdamStep<float>&, float*, const float*, float*, float*, std::int64_t) noexcept;
template void adam_apply<double>(const AdamStep<double>&, double*, const double*, double*, double*,
                                 std::int64_t) noexcept;
template void copy_to_mirrors<float>(std::span<const AdamMirror<float>>, const float*, const float*, const float*,
                                     std::int64_t, std::int64_t) noexcept;
template void copy_to_mirrors<double>(std::span<const AdamMirror<double>>, const double*, const double*, const double*,
                                      std::int64_t, std::int64_t) noexcept;
template void adam_update<float>(float*, const float*, float*, float*, std::int64_t, float, float, float, float,
                                 std::int64_t);
template void adam_update<double>(double*, const double*, double*, double*, std::int64_t, double, double, double,
                                  double, std::int64_t);

template void adam_update_summed<float>(float*, const float* const*, std::size_t, float*, float*, std::int64_t, float,
                                        float, float, float, std::int64_t, std::span<const AdamMirror<float>>);
template void adam_update_summed<double>(double*, const double* const*, std::size_t, double*, double*, std::int64_t,
                                         double, double, double, double, std::int64_t,
                                         std::span<const AdamMirror<double>>);

template void sgd_update_multi<float>(std::span<const SgdTensors<float>>, float, float, bool);
template void sgd_update_multi<double>(std::span<const SgdTensors<double>>, double, double, bool);
template void adam_update_multi<float>(std::span<const AdamTensors<float>>, float, float, float, float, std::int64_t);
template void adam_update_multi<double>(std::span<const AdamTensors<double>>, double, double, double, double,
                                        std::int64_t);

}  // namespace tp::backend::cpu

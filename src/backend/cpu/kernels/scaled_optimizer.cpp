// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/scaled_optimizer.hpp"

#include <algorithm>
#include <array>
#include <string_view>
#include <type_traits>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/half_convert.hpp"
#include "backend/cpu/kernels/optimizer.hpp"

namespace tp::backend::cpu {

namespace {

// 8-16 KiB on the stack: large enough that the per-block call costs nothing measurable, small enough to
// stay in L1 next to the parameter and slot blocks it is combined with.
constexpr std::int64_t kBlock = 2048;

// Parameters per chunk of the intra-op threads' split (the float32 updates' grain, optimizer.cpp): each
// thread widens and updates its chunks block by block, so the update splits over the threads as the float32
// one does. Element-wise: the bits do not depend on the split.
constexpr std::int64_t kChunk = 8 * kBlock;

// Calls update(offset, count, block) for each block of the gradient, widened to T and scaled.
template <typename T, typename G, typename Update>
void for_each_scaled_block(const G* grad, T grad_scale, std::int64_t n, const Update& update) {
  parallel_for(n, kChunk, [&](std::int64_t begin, std::int64_t end) {
    std::array<T, kBlock> block;
    for (std::int64_t offset = begin; offset < end; offset += kBlock) {
      const std::int64_t count = std::min(kBlock, end - offset);
      if constexpr (std::is_same_v<G, T>) {
        std::copy_n(grad + offset, count, block.data());
      } else {
        detail::widen_span(grad + offset, block.data(), count);
      }
      if (grad_scale != T{1}) {  // x 1 is exact: skipped (mixed_bfloat16's updates have no loss scale)
        for (std::int64_t i = 0; i < count; ++i) block[static_cast<std::size_t>(i)] *= grad_scale;
      }
      update(offset, count, block.data());
    }
  });
}

}  // namespace

template <typename T, typename G>
void sgd_update_scaled(T* param, const G* grad, T grad_scale, T* velocity, std::int64_t n, T lr, T momentum,
                       bool nesterov) {
  constexpr std::string_view kKernel = "sgd_update_scaled";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "param", param, n);
  detail::check_pointer(kKernel, "grad", grad, n);
  if (velocity != nullptr) detail::check_pointer(kKernel, "velocity", velocity, n);
  // The blocks run on the intra-op threads, where nothing may throw: the hyperparameters are checked here.
  sgd_update<T>(param, nullptr, velocity, 0, lr, momentum, nesterov);
  for_each_scaled_block(grad, grad_scale, n, [&](std::int64_t offset, std::int64_t count, const T* block) {
    sgd_update<T>(param + offset, block, velocity == nullptr ? nullptr : velocity + offset, count, lr, momentum,
                  nesterov);
  });
}

template <typename T, typename G>
void adam_update_scaled(T* param, const G* grad, T grad_scale, T* m, T* v, std::int64_t n, T lr, T beta1, T beta2,
                        T epsilon, std::int64_t step) {
  constexpr std::string_view kKernel = "adam_update_scaled";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "param", param, n);
  detail::check_pointer(kKernel, "grad", grad, n);
  detail::check_pointer(kKernel, "m", m, n);
  detail::check_pointer(kKernel, "v", v, n);
  // The blocks run on the intra-op threads, where nothing may throw: the hyperparameters are checked here
  // (n == 0 included, as the float32 kernel does).
  adam_update<T>(param, nullptr, m, v, 0, lr, beta1, beta2, epsilon, step);
  for_each_scaled_block(grad, grad_scale, n, [&](std::int64_t offset, std::int64_t count, const T* block) {
    adam_update<T>(param + offset, block, m + offset, v + offset, count, lr, beta1, beta2, epsilon, step);
  });
}

TP_DECLARE_SCALED_OPTIMIZER(float, float, )
TP_DECLARE_SCALED_OPTIMIZER(float, Half, )
TP_DECLARE_SCALED_OPTIMIZER(float, BFloat16, )
TP_DECLARE_SCALED_OPTIMIZER(double, double, )

}  // namespace tp::backend::cpu

// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/scaled_optimizer.hpp"

#include <algorithm>
#include <array>
#include <string_view>
#include <type_traits>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/adam_bfloat16.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/half_convert.hpp"
#include "backend/cpu/kernels/isa_clones.hpp"
#include "backend/cpu/kernels/optimizer.hpp"
#include "tensorpool/core/error.hpp"

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

// The sums of add_scaled_half (each addition computed in float32 and rounded once to H), kept widened: sum =
// first + second, then sum += addend. One clone per instruction set (isa_clones.hpp); one addition per element,
// so every clone gives the same bits. For bfloat16 the loops are integer arithmetic the compiler vectorises:
// an addend is widened by a shift alone (the core widening also sets a NaN's quiet bit, but a NaN addend makes
// the sum a NaN with that addend's payload either way, and the rounding below sets the quiet bit), and the sum
// is rounded on its bits (detail::round_to_bfloat16, adam_bfloat16.hpp).

template <typename H>
TP_ISA_CLONES void sum_rounded(const H* first, const H* second, float* sum, std::int64_t n) {
  if constexpr (std::is_same_v<H, Half>) {
    const float* table = detail::half_to_float_table();
    for (std::int64_t i = 0; i < n; ++i) {
      sum[i] =
          detail::widen(detail::narrow<Half>(detail::widen(first[i], table) + detail::widen(second[i], table)), table);
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      sum[i] = detail::round_to_bfloat16(detail::shifted(first[i]) + detail::shifted(second[i]));
  }
}

template <typename H>
TP_ISA_CLONES void add_rounded(float* sum, const H* addend, std::int64_t n) {
  if constexpr (std::is_same_v<H, Half>) {
    const float* table = detail::half_to_float_table();
    for (std::int64_t i = 0; i < n; ++i) {
      sum[i] = detail::widen(detail::narrow<Half>(sum[i] + detail::widen(addend[i], table)), table);
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) sum[i] = detail::round_to_bfloat16(sum[i] + detail::shifted(addend[i]));
  }
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
  // The blocks run on the intra-op threads, where nothing may throw: the hyperparameters are checked here, once.
  const AdamStep<T> scalars = adam_step(kKernel, lr, beta1, beta2, epsilon, step);
  for_each_scaled_block(grad, grad_scale, n, [&](std::int64_t offset, std::int64_t count, const T* block) {
    adam_apply(scalars, param + offset, block, m + offset, v + offset, count);
  });
}

template <typename H>
void adam_update_summed_half(float* param, const H* const* grads, std::size_t count, float* m, float* v, std::int64_t n,
                             float lr, float beta1, float beta2, float epsilon, std::int64_t step,
                             std::span<const AdamMirror<float>> mirrors, HalfCopies<H> copies) {
  constexpr std::string_view kKernel = "adam_update_summed_half";
  check_summed_update(kKernel, param, grads, count, m, v, n, mirrors);
  if (copies.own != nullptr) {
    detail::check_pointer(kKernel, "copies.own", copies.own, n);
    for (H* copy : copies.mirrors) detail::check_pointer(kKernel, "copies.mirrors[k]", copy, n);
  } else if (!copies.mirrors.empty()) {
    TP_THROW(InvalidArgument, detail::kComponent, kKernel, ": ", copies.mirrors.size(),
             " mirrors of the compute copy but no copy of its own (copies.own is null)");
  }
  // The blocks run on the intra-op threads, where nothing may throw: the hyperparameters are checked here, once.
  const AdamStep<float> scalars = adam_step(kKernel, lr, beta1, beta2, epsilon, step);
  parallel_for(n, kChunk, [&](std::int64_t begin, std::int64_t end) {
    std::array<float, kBlock> sum;
    for (std::int64_t offset = begin; offset < end; offset += kBlock) {
      const std::int64_t length = std::min(kBlock, end - offset);
      if constexpr (std::is_same_v<H, BFloat16>) {
        if (count <= 2) {  // one or two replicas (the main jobs): the sum, the update and the copy in one pass
          adam_bfloat16(param + offset, grads[0] + offset, count == 2 ? grads[1] + offset : nullptr, m + offset,
                        v + offset, copies.own == nullptr ? nullptr : copies.own + offset, length, scalars);
          copy_to_mirrors(mirrors, param, m, v, offset, length);
          for (H* copy : copies.mirrors) std::copy_n(copies.own + offset, length, copy + offset);
          continue;
        }
      }
      if (count == 1) {
        detail::widen_span(grads[0] + offset, sum.data(), length);
      } else {
        sum_rounded(grads[0] + offset, grads[1] + offset, sum.data(), length);
      }
      for (std::size_t index = 2; index < count; ++index) add_rounded(sum.data(), grads[index] + offset, length);
      adam_apply(scalars, param + offset, sum.data(), m + offset, v + offset, length);
      copy_to_mirrors(mirrors, param, m, v, offset, length);
      if (copies.own != nullptr) {
        detail::narrow_span(param + offset, copies.own + offset, length);
        for (H* copy : copies.mirrors) std::copy_n(copies.own + offset, length, copy + offset);
      }
    }
  });
}

TP_DECLARE_SCALED_OPTIMIZER(float, float, )
TP_DECLARE_SCALED_OPTIMIZER(float, Half, )
TP_DECLARE_SCALED_OPTIMIZER(float, BFloat16, )
TP_DECLARE_SCALED_OPTIMIZER(double, double, )

template void adam_update_summed_half<Half>(float*, const Half* const*, std::size_t, float*, float*, std::int64_t,
                                            float, float, float, float, std::int64_t,
                                            std::span<const AdamMirror<float>>, HalfCopies<Half>);
template void adam_update_summed_half<BFloat16>(float*, const BFloat16* const*, std::size_t, float*, float*,
                                                std::int64_t, float, float, float, float, std::int64_t,
                                                std::span<const AdamMirror<float>>, HalfCopies<BFloat16>);

}  // namespace tp::backend::cpu

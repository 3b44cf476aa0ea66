// SPDX-License-Identifier: Apache-2.0
#pragma once
// Dtype dispatch for the CPU kernel table's entries: the op checked the dtype, the entry picks the kernel's
// template instance from it.

#include <utility>

#include "tensorpool/core/dtype.hpp"
#include "tensorpool/core/half.hpp"

namespace tp::backend::cpu::op_kernels {

inline bool is_half(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

// Calls function(T{}) with T the C++ type of a floating dtype (f32 or f64; anything else is f64's).
template <typename Function>
void dispatch_floating(DType dtype, Function&& function) {
  if (dtype == DType::f32) {
    std::forward<Function>(function)(float{});
  } else {
    std::forward<Function>(function)(double{});
  }
}

// Calls function(H{}) with H = tp::Half or tp::BFloat16 for a dtype for which is_half holds.
template <typename Function>
void dispatch_half(DType dtype, Function&& function) {
  if (dtype == DType::f16) {
    std::forward<Function>(function)(Half{});
  } else {
    std::forward<Function>(function)(BFloat16{});
  }
}

}  // namespace tp::backend::cpu::op_kernels

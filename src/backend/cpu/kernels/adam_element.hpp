// SPDX-License-Identifier: Apache-2.0
#pragma once
// One parameter's Adam step (optimizer.hpp's formulas, with the step's scalars of adam_step): the expressions
// every Adam loop shares, float32 and 16-bit gradients alike, so their bits agree (the kernels are compiled
// without floating-point contraction, so no loop fuses a multiply-add where another does not).

#include <cmath>

namespace tp::backend::cpu::detail {

template <typename T>
[[gnu::always_inline]] inline void adam_element(T g, T& param, T& m, T& v, T alpha, T one_minus_beta1,
                                                T one_minus_beta2, T epsilon) {
  const T m_new = m + (g - m) * one_minus_beta1;
  const T v_new = v + (g * g - v) * one_minus_beta2;
  m = m_new;
  v = v_new;
  param -= m_new * alpha / (std::sqrt(v_new) + epsilon);
}

}  // namespace tp::backend::cpu::detail

// SPDX-License-Identifier: Apache-2.0
#pragma once
// all_finite: true when none of x[0..n) (float, double, float16 or bfloat16) is Inf or NaN (n == 0: true). Loss scaling
// asks it of every gradient to decide whether a step's update may run (a float16 overflow shows up as Inf, or NaN after
// Inf - Inf).

#include <cstdint>

#include "tensorpool/core/half.hpp"

namespace tp::backend::cpu {

template <typename T>
bool all_finite(const T* x, std::int64_t n);

extern template bool all_finite<float>(const float*, std::int64_t);
extern template bool all_finite<double>(const double*, std::int64_t);
extern template bool all_finite<Half>(const Half*, std::int64_t);
extern template bool all_finite<BFloat16>(const BFloat16*, std::int64_t);

}  // namespace tp::backend::cpu

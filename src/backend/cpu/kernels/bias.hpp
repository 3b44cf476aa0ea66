// SPDX-License-Identifier: Apache-2.0
#pragma once
// The bias of a dense layer, on a row-major [rows, cols] activation:
//   bias_add:      y[r, c]  = x[r, c] + bias[c]     (y may alias x; bias must not overlap y)
//   bias_add_grad: dbias[c] = sum over r of dy[r, c] (column sums, accumulated as reduce_sum does:
//                                                     in double; rows == 0 gives zeros)

#include <cstdint>

namespace tp::backend::cpu {

template <typename T>
void bias_add(const T* x, const T* bias, T* y, std::int64_t rows, std::int64_t cols);

template <typename T>
void bias_add_grad(const T* dy, T* dbias, std::int64_t rows, std::int64_t cols);

extern template void bias_add<float>(const float*, const float*, float*, std::int64_t, std::int64_t);
extern template void bias_add<double>(const double*, const double*, double*, std::int64_t, std::int64_t);
extern template void bias_add_grad<float>(const float*, float*, std::int64_t, std::int64_t);
extern template void bias_add_grad<double>(const double*, double*, std::int64_t, std::int64_t);

}  // namespace tp::backend::cpu

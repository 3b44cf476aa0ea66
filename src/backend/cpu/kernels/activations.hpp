// SPDX-License-Identifier: Apache-2.0
#pragma once
// Elementwise activations and their gradients on contiguous buffers.
//
//   relu:      y[i]  = x[i] > 0 ? x[i] : 0       (NaN propagates, -0 becomes +0)
//   relu_grad: dx[i] = x[i] > 0 ? dy[i] : 0      (0 at x <= 0, as TensorFlow's ReluGrad; 0 at NaN)
// y may alias x, and dx may alias dy or x. n == 0 touches nothing.

#include <cstdint>

namespace tp::backend::cpu {

template <typename T>
void relu(const T* x, T* y, std::int64_t n);

template <typename T>
void relu_grad(const T* dy, const T* x, T* dx, std::int64_t n);

extern template void relu<float>(const float*, float*, std::int64_t);
extern template void relu<double>(const double*, double*, std::int64_t);
extern template void relu_grad<float>(const float*, const float*, float*, std::int64_t);
extern template void relu_grad<double>(const double*, const double*, double*, std::int64_t);

}  // namespace tp::backend::cpu

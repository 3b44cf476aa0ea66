// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/activations.hpp"

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/isa_clones.hpp"

namespace tp::backend::cpu {
namespace {

template <typename T>
TP_ISA_CLONES void relu_loop(const T* x, T* y, std::int64_t n) {
  // `x <= 0` is false for NaN, so NaN passes through unchanged (as numpy.maximum and PyTorch do).
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] <= T{0} ? T{0} : x[i];
}

template <typename T>
TP_ISA_CLONES void relu_grad_loop(const T* dy, const T* x, T* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = x[i] > T{0} ? dy[i] : T{0};
}

}  // namespace

template <typename T>
void relu(const T* x, T* y, std::int64_t n) {
  constexpr std::string_view kKernel = "relu";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "x", x, n);
  detail::check_pointer(kKernel, "y", y, n);
  parallel_for(n, kStreamingGrain,
               [&](std::int64_t begin, std::int64_t end) { relu_loop(x + begin, y + begin, end - begin); });
}

template <typename T>
void relu_grad(const T* dy, const T* x, T* dx, std::int64_t n) {
  constexpr std::string_view kKernel = "relu_grad";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "dy", dy, n);
  detail::check_pointer(kKernel, "x", x, n);
  detail::check_pointer(kKernel, "dx", dx, n);
  parallel_for(n, kStreamingGrain, [&](std::int64_t begin, std::int64_t end) {
    relu_grad_loop(dy + begin, x + begin, dx + begin, end - begin);
  });
}

template void relu<float>(const float*, float*, std::int64_t);
template void relu<double>(const double*, double*, std::int64_t);
template void relu_grad<float>(const float*, const float*, float*, std::int64_t);
template void relu_grad<double>(const double*, const double*, double*, std::int64_t);

}  // namespace tp::backend::cpu

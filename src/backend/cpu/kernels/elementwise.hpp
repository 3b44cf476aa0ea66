// SPDX-License-Identifier: Apache-2.0
#pragma once
// Elementwise arithmetic on contiguous buffers. One generic implementation per broadcast form, templated on
// the operation; the BinaryOp enum picks the operation once per call, outside the element loop.
//
// Forms (z may alias x, and in the same-length form also y, element for element):
//   binary:               z[i]      = x[i]      op y[i]          for i < n
//   binary_row_broadcast: z[r, c]   = x[r, c]   op row[c]        for a row-major [rows, cols] x
//   binary_scalar:        z[i]      = x[i]      op scalar
// In the broadcast form `row` must not overlap z. Arithmetic is plain IEEE in T: div by zero gives +-inf or
// NaN, exactly as the hardware does. Empty sizes (n, rows or cols == 0) touch nothing.

#include <cstdint>

namespace tp::backend::cpu {

enum class BinaryOp : std::uint8_t { add, sub, mul, div };

template <typename T>
void binary(BinaryOp op, const T* x, const T* y, T* z, std::int64_t n);

template <typename T>
void binary_row_broadcast(BinaryOp op, const T* x, const T* row, T* z, std::int64_t rows, std::int64_t cols);

template <typename T>
void binary_scalar(BinaryOp op, const T* x, T scalar, T* z, std::int64_t n);

// y[i] = alpha * x[i]; y may alias x.
template <typename T>
void scale(const T* x, T alpha, T* y, std::int64_t n);

// y[i] += alpha * x[i] (BLAS axpy); x must not overlap y unless x == y.
template <typename T>
void add_scaled(T* y, T alpha, const T* x, std::int64_t n);

// Named same-length forms.
template <typename T>
void add(const T* x, const T* y, T* z, std::int64_t n) {
  binary(BinaryOp::add, x, y, z, n);
}
template <typename T>
void sub(const T* x, const T* y, T* z, std::int64_t n) {
  binary(BinaryOp::sub, x, y, z, n);
}
template <typename T>
void mul(const T* x, const T* y, T* z, std::int64_t n) {
  binary(BinaryOp::mul, x, y, z, n);
}
template <typename T>
void div(const T* x, const T* y, T* z, std::int64_t n) {
  binary(BinaryOp::div, x, y, z, n);
}

#define TP_CPU_ELEMENTWISE_DECLARE(T)                                                                         \
  extern template void binary<T>(BinaryOp, const T*, const T*, T*, std::int64_t);                             \
  extern template void binary_row_broadcast<T>(BinaryOp, const T*, const T*, T*, std::int64_t, std::int64_t); \
  extern template void binary_scalar<T>(BinaryOp, const T*, T, T*, std::int64_t);                             \
  extern template void scale<T>(const T*, T, T*, std::int64_t);                                               \
  extern template void add_scaled<T>(T*, T, const T*, std::int64_t);
TP_CPU_ELEMENTWISE_DECLARE(float)
TP_CPU_ELEMENTWISE_DECLARE(double)
#undef TP_CPU_ELEMENTWISE_DECLARE

}  // namespace tp::backend::cpu

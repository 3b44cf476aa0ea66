// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/elementwise.hpp"

#include <utility>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/isa_clones.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {
namespace {

struct Add {
  template <typename T>
  T operator()(T left, T right) const {
    return left + right;
  }
};
struct Sub {
  template <typename T>
  T operator()(T left, T right) const {
    return left - right;
  }
};
struct Mul {
  template <typename T>
  T operator()(T left, T right) const {
    return left * right;
  }
};
struct Div {
  template <typename T>
  T operator()(T left, T right) const {
    return left / right;
  }
};

// The one place a BinaryOp becomes a functor: calls `body(functor)`, so each loop is compiled per operation.
template <typename Body>
void with_operation(std::string_view kernel, BinaryOp op, Body&& body) {
  switch (op) {
    case BinaryOp::add: return std::forward<Body>(body)(Add{});
    case BinaryOp::sub: return std::forward<Body>(body)(Sub{});
    case BinaryOp::mul: return std::forward<Body>(body)(Mul{});
    case BinaryOp::div: return std::forward<Body>(body)(Div{});
  }
  TP_THROW(InvalidArgument, detail::kComponent, kernel, ": op = ", static_cast<int>(op), " is not a BinaryOp");
}

template <typename T, typename Op>
TP_ISA_CLONES void binary_loop(Op apply, const T* x, const T* y, T* z, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) z[i] = apply(x[i], y[i]);
}

template <typename T, typename Op>
TP_ISA_CLONES void row_broadcast_loop(Op apply, const T* x, const T* row, T* z, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* x_row = x + r * cols;
    T* z_row = z + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) z_row[c] = apply(x_row[c], row[c]);
  }
}

template <typename T, typename Op>
TP_ISA_CLONES void scalar_loop(Op apply, const T* x, T scalar, T* z, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) z[i] = apply(x[i], scalar);
}

template <typename T>
TP_ISA_CLONES void add_scaled_loop(T* y, T alpha, const T* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace

template <typename T>
void binary(BinaryOp op, const T* x, const T* y, T* z, std::int64_t n) {
  constexpr std::string_view kKernel = "binary";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "x", x, n);
  detail::check_pointer(kKernel, "y", y, n);
  detail::check_pointer(kKernel, "z", z, n);
  with_operation(kKernel, op, [&](auto apply) {
    parallel_for(n, kStreamingGrain, [&](std::int64_t begin, std::int64_t end) {
      binary_loop(apply, x + begin, y + begin, z + begin, end - begin);
    });
  });
}

template <typename T>
void binary_row_broadcast(BinaryOp op, const T* x, const T* row, T* z, std::int64_t rows, std::int64_t cols) {
  constexpr std::string_view kKernel = "binary_row_broadcast";
  detail::check_size(kKernel, "rows", rows);
  detail::check_size(kKernel, "cols", cols);
  const std::int64_t count = detail::checked_product(kKernel, rows, cols);
  detail::check_pointer(kKernel, "x", x, count);
  detail::check_pointer(kKernel, "row", row, count == 0 ? 0 : cols);
  detail::check_pointer(kKernel, "z", z, count);
  with_operation(kKernel, op, [&](auto apply) {
    parallel_for(rows, rows_per_chunk(cols), [&](std::int64_t begin, std::int64_t end) {
      row_broadcast_loop(apply, x + begin * cols, row, z + begin * cols, end - begin, cols);
    });
  });
}

template <typename T>
void binary_scalar(BinaryOp op, const T* x, T scalar, T* z, std::int64_t n) {
  constexpr std::string_view kKernel = "binary_scalar";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "x", x, n);
  detail::check_pointer(kKernel, "z", z, n);
  with_operation(kKernel, op, [&](auto apply) {
    parallel_for(n, kStreamingGrain, [&](std::int64_t begin, std::int64_t end) {
      scalar_loop(apply, x + begin, scalar, z + begin, end - begin);
    });
  });
}

template <typename T>
void scale(const T* x, T alpha, T* y, std::int64_t n) {
  binary_scalar(BinaryOp::mul, x, alpha, y, n);
}

template <typename T>
void add_scaled(T* y, T alpha, const T* x, std::int64_t n) {
  constexpr std::string_view kKernel = "add_scaled";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "y", y, n);
  detail::check_pointer(kKernel, "x", x, n);
  parallel_for(n, kStreamingGrain, [&](std::int64_t begin, std::int64_t end) {
    add_scaled_loop(y + begin, alpha, x + begin, end - begin);
  });
}

#define TP_CPU_ELEMENTWISE_INSTANTIATE(T)                                                              \
  template void binary<T>(BinaryOp, const T*, const T*, T*, std::int64_t);                             \
  template void binary_row_broadcast<T>(BinaryOp, const T*, const T*, T*, std::int64_t, std::int64_t); \
  template void binary_scalar<T>(BinaryOp, const T*, T, T*, std::int64_t);                             \
  template void scale<T>(const T*, T, T*, std::int64_t);                                               \
  template void add_scaled<T>(T*, T, const T*, std::int64_t);
TP_CPU_ELEMENTWISE_INSTANTIATE(float)
TP_CPU_ELEMENTWISE_INSTANTIATE(double)

}  // namespace tp::backend::cpu

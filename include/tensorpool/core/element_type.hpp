// SPDX-License-Identifier: Apache-2.0
#pragma once
// The C++ type that holds one element of each DType, and the checks that tie host spans to shapes.

#include <cstddef>
#include <cstdint>

#include "tensorpool/core/dtype.hpp"
#include "tensorpool/core/half.hpp"
#include "tensorpool/core/shape.hpp"

namespace tp {

template <typename T>
constexpr DType dtype_of() = delete;
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<Half>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<std::uint8_t>() {
  return DType::u8;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::boolean;
}

// Throws tp::InvalidArgument naming both when `count` host values cannot fill `shape`.
void check_element_count(std::size_t count, const Shape& shape);

}  // namespace tp

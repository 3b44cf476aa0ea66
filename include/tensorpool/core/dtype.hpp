// SPDX-License-Identifier: Apache-2.0
#pragma once
// Element types of tensors. Every DType has a fixed size in bytes, a canonical name ("float32") used in
// reports and traces, and a short name ("f32") accepted by parse_dtype alongside the canonical one.

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace tp {

// `bool` is a keyword, so its enumerator is `boolean`; it is still printed and parsed as "bool".
enum class DType : std::uint8_t { f32, f16, bf16, f64, i32, i64, u8, boolean };

// Bytes per element: 4, 2, 2, 8, 4, 8, 1, 1.
[[nodiscard]] std::size_t size_of(DType dtype);

// Canonical name: "float32", "float16", "bfloat16", "float64", "int32", "int64", "uint8", "bool".
[[nodiscard]] std::string_view name_of(DType dtype);

// Accepts the canonical names and the short ones (f32, f16, bf16, f64, i32, i64, u8, bool), exactly
// (case-sensitive, no surrounding spaces). Throws tp::InvalidArgument naming the text and listing the
// accepted names on anything else.
[[nodiscard]] DType parse_dtype(std::string_view text);

// True for f32, f16, bf16 and f64.
[[nodiscard]] bool is_floating(DType dtype);

// Writes name_of(dtype).
std::ostream& operator<<(std::ostream& stream, DType dtype);

}  // namespace tp

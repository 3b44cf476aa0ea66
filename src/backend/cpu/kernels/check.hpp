// SPDX-License-Identifier: Apache-2.0
#pragma once
// Argument checks shared by the CPU kernels. A raw kernel sees only pointers and sizes, so it checks only
// what those can tell: sizes are non-negative, element counts fit in int64, and a pointer is null only when
// it addresses no elements. Shapes, dtypes and aliasing are the Tensor-level op layer's job. Every failure
// throws tp::InvalidArgument prefixed "[cpu]", naming the kernel, the argument and its value.

#include <cstdint>
#include <string_view>

namespace tp::backend::cpu::detail {

inline constexpr std::string_view kComponent = "cpu";

// Throws unless value >= 0.
void check_size(std::string_view kernel, std::string_view name, std::int64_t value);

// first x second for two sizes already checked non-negative; throws if the product overflows int64.
std::int64_t checked_product(std::string_view kernel, std::int64_t first, std::int64_t second);

// Throws if `pointer` is null while it must address `count` > 0 elements.
void check_pointer(std::string_view kernel, std::string_view name, const void* pointer, std::int64_t count);

}  // namespace tp::backend::cpu::detail

// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/finite.hpp"

#include <cstring>
#include <string_view>
#include <type_traits>

#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/isa_clones.hpp"

namespace tp::backend::cpu {
namespace {

template <typename T>
TP_ISA_CLONES bool all_finite_loop(const T* x, std::int64_t n) {
  // Inf and NaN are exactly the values whose exponent bits are all ones. Testing the bits (an integer OR
  // reduction, which vectorises) instead of comparing floats also holds under flush-to-zero.
  using Bits = std::conditional_t<sizeof(T) == 2, std::uint16_t,
                                  std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>;
  constexpr auto kExponent = static_cast<Bits>(std::is_same_v<T, Half>       ? 0x7C00ULL
                                               : std::is_same_v<T, BFloat16> ? 0x7F80ULL
                                               : sizeof(T) == 4              ? 0x7F80'0000ULL
                                                                             : 0x7FF0'0000'0000'0000ULL);
  Bits special = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, &x[i], sizeof(T));
    special |= static_cast<Bits>((bits & kExponent) == kExponent);
  }
  return special == 0;
}

}  // namespace

template <typename T>
bool all_finite(const T* x, std::int64_t n) {
  constexpr std::string_view kKernel = "all_finite";
  detail::check_size(kKernel, "n", n);
  detail::check_pointer(kKernel, "x", x, n);
  return all_finite_loop(x, n);
}

template bool all_finite<float>(const float*, std::int64_t);
template bool all_finite<double>(const double*, std::int64_t);
template bool all_finite<Half>(const Half*, std::int64_t);
template bool all_finite<BFloat16>(const BFloat16*, std::int64_t);

}  // namespace tp::backend::cpu

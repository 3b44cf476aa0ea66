// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/convert.hpp"

#include "core/isa_clones.hpp"

namespace tp {

// A hot loop: CMakeLists.txt compiles this file as it does the CPU kernels (-O3, -ffp-contract=off), so it
// vectorises, and every ISA clone divides exactly as the scalar loop does.
TP_ISA_CLONES void u8_to_f32_divided(const std::uint8_t* src, float divisor, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) / divisor;
}

}  // namespace tp

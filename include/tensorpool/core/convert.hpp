// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host-side element conversions that the input pipeline runs on host batches (no device, no stream).

#include <cstdint>

namespace tp {

// dst[i] = float(src[i]) / divisor, one correctly rounded division per element (so divisor 1 is the plain
// u8 -> f32 cast): the input pipeline's pixel normalisation, vectorised. A 256-entry lookup table gives the
// same bits but loads one byte at a time. src and dst must not overlap; n <= 0 touches nothing.
void u8_to_f32_divided(const std::uint8_t* src, float divisor, float* dst, std::int64_t n);

}  // namespace tp

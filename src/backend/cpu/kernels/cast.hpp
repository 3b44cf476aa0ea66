// SPDX-License-Identifier: Apache-2.0
#pragma once
// Element type conversion between every pair of tp::DType (f32, f16, bf16, f64, i32, i64, u8, bool),
// dispatched through an 8 x 8 table of template instantiations. Each conversion rounds exactly once and never
// invokes undefined behaviour, whatever the input bits:
//
//   to bool:            x != 0; NaN -> true, -0 -> false.                  Stored as one byte 0 or 1.
//   from bool:          any nonzero byte -> 1, zero -> 0 (so bool -> bool normalises to 0 / 1).
//   float -> integer:   truncation toward zero; NaN -> 0; out-of-range values (and +-inf) saturate at the
//                       target's min / max (uint8: negatives -> 0). (A plain static_cast would be UB.)
//   integer -> integer: saturating at the target's min / max.
//   -> f32 / f64:       round to nearest, ties to even (exact when representable).
//   -> f16 / bf16:      round to nearest, ties to even, through tp::Half / tp::BFloat16 (core/half.hpp):
//                       float16 overflows to +-inf from 65520 up (65504 is the largest finite), NaN stays
//                       NaN. Sources wider than float (f64, i32, i64) are first narrowed to float with
//                       round-to-odd, which makes the second rounding exact: the result equals a single
//                       correct rounding of the source value (no double-rounding error).
//   same dtype:         a byte copy (NaN payloads and -0 kept), except bool, which normalises.
//
// src and dst must not overlap, except src == dst with equal element sizes and n elements of each.
// n == 0 touches nothing.

#include <cstdint>

#include "tensorpool/core/dtype.hpp"

namespace tp::backend::cpu {

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n);

}  // namespace tp::backend::cpu

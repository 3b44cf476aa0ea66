// SPDX-License-Identifier: Apache-2.0
#pragma once
// bfloat16 GEMM on the CPU's own bfloat16 instructions, through oneDNN's matmul primitive (Debian libdnnl):
// A and B stay bfloat16, products are accumulated in float32, C is rounded once to bfloat16 (the contract of
// matmul_half in half_nn.hpp). OpenBLAS, our float32 GEMM, has no bfloat16 GEMM in Debian's build.
//
// Used by matmul_half<BFloat16> when bf16_gemm_native() holds: oneDNN's effective ISA includes AVX512_BF16
// (Cooper Lake, Sapphire Rapids with AMX, AMD Zen 4...). Elsewhere oneDNN would emulate bfloat16 and
// matmul_half converts around sgemm instead. As the float32 GEMM (gemm.cpp), a large product is split into
// blocks of C's rows or columns over the intra-op threads (intra_op_pool.hpp), one single-threaded oneDNN
// call per block, and its bits do not depend on the thread count. Primitives and their memory objects are
// cached per thread and block shape (each device stream and each intra-op helper is one thread, and a step
// repeats the same shapes), so a steady-state step builds none.

#include <cstdint>

#include "backend/cpu/kernels/gemm.hpp"
#include "tensorpool/core/half.hpp"

namespace tp::backend::cpu {

bool bf16_gemm_native();

// C[m,n] = op(A) op(B), layouts as gemm.hpp; m, n, k > 0 (matmul_half handles the empty cases).
void matmul_bf16_onednn(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                        const BFloat16* a, const BFloat16* b, BFloat16* c);

// The same product computed at depth >= k: the operands are copied with zeros after the k-th entry of the
// depth, so the extra products are exact zeros and each element of C is the same sum, taken by the kernels
// oneDNN picks for that depth (its own order, so not the bits of depth k).
void matmul_bf16_onednn_at_depth(Transpose transpose_a, Transpose transpose_b, std::int64_t m, std::int64_t n,
                                 std::int64_t k, std::int64_t depth, const BFloat16* a, const BFloat16* b, BFloat16* c);

// The depth at which oneDNN would compute a product of depth k on AMX tiles: k where it does already or never
// would (no AMX), else a whole tile's depth, 32 (oneDNN 2.6 takes the tiles only above a depth of 16, and the
// mirrored main job's weight gradients at batch 32 have a depth of 16 per replica). Whether the padded product
// is the faster is matmul_half's measurement to make: the copies cost more than the tiles save on small ones.
std::int64_t bf16_gemm_tile_depth(std::int64_t k);

}  // namespace tp::backend::cpu

// SPDX-License-Identifier: Apache-2.0
// The 16-bit matrix product of the OpenCL backend (OpenCL C 1.2): C[m, n] = op(A) op(B) with A, B and C in
// float16 or bfloat16 (float32 and float64 go through CLBlast, opencl_kernels_matmul.cpp). The semantics are
// the CPU's matmul_half (backend/cpu/kernels/half_nn.cpp): operands widened exactly to float32, products summed
// in float32, the sum rounded once, to nearest even, when stored. Operands are read where they lie, so a
// product needs no float32 copies of its operands (no device memory beyond A, B and C).
//
// Shapes, row-major: A is [m, k], or [k, m] when transpose_a != 0; B is [k, n], or [n, k] when transpose_b != 0;
// C is [m, n]. Tensors are (__global T* base, ulong byte offset). The launcher handles m * n == 0 and k == 0
// (zeros) itself; a kernel here is launched only with m, n, k > 0. C must not overlap A or B (as for any GEMM:
// work-groups read A and B while others store C).
//
// Tiling: a TILE x TILE work-group computes a 4 TILE x 4 TILE block of C (local id 0 along C's columns, 1 along
// its rows), each work-item a 4 x 4 block of it, four float4 rows (explicit vectors, so that a CPU device uses its
// SIMD lanes as well as a GPU uses its work-items). For each run of CHUNK values of the inner index the group
// stages the A and B blocks it needs in local memory, widened to float (consecutive work-items read consecutive
// addresses for every transpose), then every work-item adds its products. Each element's sum runs over the
// inner index in increasing order, one rounding per product and per addition (no contraction into fused
// multiply-adds), starting from +0; padding beyond m, n or k is never added into a sum.

#define STORAGE_f16 half
#define STORAGE_bf16 ushort
#define LOAD_f16(p, i) vload_half((i), (p))
#define LOAD_bf16(p, i) bf16_to_float((p)[i])
#define STORE_f16(p, i, v) vstore_half_rte((v), (i), (p))
#define STORE_bf16(p, i, v) ((p)[i] = float_to_bf16(v))

#define CHUNK 16u

// matmul_<TILE>_<S>: the launcher takes the largest TILE whose TILE x TILE work-group the device allows.
// a_block[r][p] = A(row0 + r, p0 + p), padded by one column so that a column walk does not hit one bank
// repeatedly; b_block[p][c] = B(p0 + p, col0 + c), read four columns at a time.
#define MATMUL_KERNEL(TILE, S)                                                                                         \
  __kernel __attribute__((reqd_work_group_size(TILE, TILE, 1))) void matmul_##TILE##_##S(                              \
      __global const STORAGE_##S* a, ulong a_offset, __global const STORAGE_##S* b, ulong b_offset,                    \
      __global STORAGE_##S* c, ulong c_offset, ulong m, ulong n, ulong k, uint transpose_a, uint transpose_b) {        \
    __local float a_block[4 * TILE][CHUNK + 1];                                                                        \
    __local float b_block[CHUNK][4 * TILE];                                                                            \
    __global const STORAGE_##S* a_base = TP_AT(const STORAGE_##S, a, a_offset);                                        \
    __global const STORAGE_##S* b_base = TP_AT(const STORAGE_##S, b, b_offset);                                        \
    const uint x = (uint)get_local_id(0);                                                                              \
    const uint y = (uint)get_local_id(1);                                                                              \
    const uint id = y * TILE + x;                                                                                      \
    const ulong row0 = (ulong)get_group_id(1) * (4 * TILE);                                                            \
    const ulong col0 = (ulong)get_group_id(0) * (4 * TILE);                                                            \
    float4 sum0 = (float4)(0.0f), sum1 = (float4)(0.0f), sum2 = (float4)(0.0f), sum3 = (float4)(0.0f);                 \
    for (ulong p0 = 0; p0 < k; p0 += CHUNK) {                                                                          \
      /* A(i, q) is a[i * k + q], or a[q * m + i] transposed. */                                                       \
      for (uint e = id; e < 4 * TILE * CHUNK; e += TILE * TILE) {                                                      \
        const uint r = transpose_a == 0u ? e / CHUNK : e % (4 * TILE);                                                 \
        const uint p = transpose_a == 0u ? e % CHUNK : e / (4 * TILE);                                                 \
        const ulong i = row0 + r, q = p0 + p;                                                                          \
        a_block[r][p] = i < m && q < k ? LOAD_##S(a_base, transpose_a == 0u ? i * k + q : q * m + i) : 0.0f;           \
      }                                                                                                                \
      /* B(q, j) is b[q * n + j], or b[j * k + q] transposed. */                                                       \
      for (uint e = id; e < 4 * TILE * CHUNK; e += TILE * TILE) {                                                      \
        const uint col = transpose_b == 0u ? e % (4 * TILE) : e / CHUNK;                                               \
        const uint p = transpose_b == 0u ? e / (4 * TILE) : e % CHUNK;                                                 \
        const ulong q = p0 + p, j = col0 + col;                                                                        \
        b_block[p][col] = q < k && j < n ? LOAD_##S(b_base, transpose_b == 0u ? q * n + j : j * k + q) : 0.0f;         \
      }                                                                                                                \
      barrier(CLK_LOCAL_MEM_FENCE);                                                                                    \
      const uint count = k - p0 < CHUNK ? (uint)(k - p0) : CHUNK;                                                      \
      for (uint p = 0; p < count; ++p) {                                                                               \
        const float4 row = vload4(x, b_block[p]);                                                                      \
        sum0 = sum0 + a_block[4 * y][p] * row;                                                                         \
        sum1 = sum1 + a_block[4 * y + 1][p] * row;                                                                     \
        sum2 = sum2 + a_block[4 * y + 2][p] * row;                                                                     \
        sum3 = sum3 + a_block[4 * y + 3][p] * row;                                                                     \
      }                                                                                                                \
      barrier(CLK_LOCAL_MEM_FENCE);                                                                                    \
    }                                                                                                                  \
    __global STORAGE_##S* out = TP_AT(STORAGE_##S, c, c_offset);                                                       \
    const ulong i0 = row0 + 4 * y, j0 = col0 + 4 * x;                                                                  \
    for (uint r = 0; r < 4; ++r) {                                                                                     \
      const float4 sum = r == 0u ? sum0 : r == 1u ? sum1 : r == 2u ? sum2 : sum3;                                      \
      const ulong i = i0 + r;                                                                                          \
      if (i < m) {                                                                                                     \
        if (j0 < n) STORE_##S(out, i * n + j0, sum.s0);                                                                \
        if (j0 + 1 < n) STORE_##S(out, i * n + j0 + 1, sum.s1);                                                        \
        if (j0 + 2 < n) STORE_##S(out, i * n + j0 + 2, sum.s2);                                                        \
        if (j0 + 3 < n) STORE_##S(out, i * n + j0 + 3, sum.s3);                                                        \
      }                                                                                                                \
    }                                                                                                                  \
  }

MATMUL_KERNEL(16, f16)
MATMUL_KERNEL(16, bf16)
MATMUL_KERNEL(8, f16)
MATMUL_KERNEL(8, bf16)
MATMUL_KERNEL(1, f16)
MATMUL_KERNEL(1, bf16)

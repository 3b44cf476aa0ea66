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
// Tiling: a TILE x TILE work-group computes a TILE x TILE block of C, one element per work-item (local id 0
// along C's columns, 1 along its rows). For each run of TILE values of the inner index the group stages the
// A and B blocks it needs in local memory, widened to float, each work-item loading one element of each
// (consecutive work-items read consecutive addresses for every transpose), then every work-item adds its
// TILE products. Each element's sum runs over the inner index in increasing order, one rounding per product
// and per addition (no contraction into fused multiply-adds), starting from +0; padding beyond m, n or k is
// never added into a sum.

#pragma OPENCL FP_CONTRACT OFF

#define TP_AT(T, base, offset) ((__global T*)((__global uchar*)(base) + (offset)))

// ---- bfloat16: elementwise.cl's bit-exact conversions (backend/cpu/kernels/half_convert.hpp) ----

// Exact widening; a NaN gets its quiet bit, as the CPU conversion gives it.
inline float bf16_to_float(ushort value) {
  const uint bits = value;
  const uint quiet = (bits & 0x7FFFu) > 0x7F80u ? 0x0040u : 0u;
  return as_float((bits | quiet) << 16);
}

// Round to nearest, ties to even, on the bits; a NaN keeps its sign and top payload bits and becomes quiet.
inline ushort float_to_bf16(float value) {
  const uint bits = as_uint(value);
  const uint rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint nan = (bits >> 16) | 0x0040u;
  return (ushort)((bits & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

#define STORAGE_f16 half
#define STORAGE_bf16 ushort
#define LOAD_f16(p, i) vload_half((i), (p))
#define LOAD_bf16(p, i) bf16_to_float((p)[i])
#define STORE_f16(p, i, v) vstore_half_rte((v), (i), (p))
#define STORE_bf16(p, i, v) ((p)[i] = float_to_bf16(v))

// matmul_<TILE>_<S>: the launcher takes the largest TILE whose TILE x TILE work-group the device allows.
// The local blocks are padded by one column so that a column walk does not hit one bank TILE times.
#define MATMUL_KERNEL(TILE, S)                                                                                         \
  __kernel __attribute__((reqd_work_group_size(TILE, TILE, 1))) void matmul_##TILE##_##S(                              \
      __global const STORAGE_##S* a, ulong a_offset, __global const STORAGE_##S* b, ulong b_offset,                    \
      __global STORAGE_##S* c, ulong c_offset, ulong m, ulong n, ulong k, uint transpose_a, uint transpose_b) {        \
    __local float a_block[TILE][TILE + 1]; /* a_block[r][p] = A(row0 + r, p0 + p) */                                  \
    __local float b_block[TILE][TILE + 1]; /* b_block[p][c] = B(p0 + p, col0 + c) */                                  \
    __global const STORAGE_##S* a_base = TP_AT(const STORAGE_##S, a, a_offset);                                        \
    __global const STORAGE_##S* b_base = TP_AT(const STORAGE_##S, b, b_offset);                                        \
    const uint x = (uint)get_local_id(0);                                                                              \
    const uint y = (uint)get_local_id(1);                                                                              \
    const ulong row0 = (ulong)get_group_id(1) * TILE;                                                                  \
    const ulong col0 = (ulong)get_group_id(0) * TILE;                                                                  \
    float sum = 0.0f;                                                                                                  \
    for (ulong p0 = 0; p0 < k; p0 += TILE) {                                                                           \
      /* A(i, p) is a[i * k + p], or a[p * m + i] transposed: x runs along the stored rows either way. */              \
      if (transpose_a == 0u) {                                                                                         \
        const ulong i = row0 + y, p = p0 + x;                                                                          \
        a_block[y][x] = i < m && p < k ? LOAD_##S(a_base, i * k + p) : 0.0f;                                           \
      } else {                                                                                                         \
        const ulong i = row0 + x, p = p0 + y;                                                                          \
        a_block[x][y] = i < m && p < k ? LOAD_##S(a_base, p * m + i) : 0.0f;                                           \
      }                                                                                                                \
      /* B(p, j) is b[p * n + j], or b[j * k + p] transposed. */                                                       \
      if (transpose_b == 0u) {                                                                                         \
        const ulong p = p0 + y, j = col0 + x;                                                                          \
        b_block[y][x] = p < k && j < n ? LOAD_##S(b_base, p * n + j) : 0.0f;                                           \
      } else {                                                                                                         \
        const ulong p = p0 + x, j = col0 + y;                                                                          \
        b_block[x][y] = p < k && j < n ? LOAD_##S(b_base, j * k + p) : 0.0f;                                           \
      }                                                                                                                \
      barrier(CLK_LOCAL_MEM_FENCE);                                                                                    \
      const uint count = k - p0 < TILE ? (uint)(k - p0) : TILE;                                                        \
      for (uint p = 0; p < count; ++p) sum = sum + a_block[y][p] * b_block[p][x];                                      \
      barrier(CLK_LOCAL_MEM_FENCE);                                                                                    \
    }                                                                                                                  \
    const ulong i = row0 + y, j = col0 + x;                                                                            \
    if (i < m && j < n) STORE_##S(TP_AT(STORAGE_##S, c, c_offset), i * n + j, sum);                                   \
  }

MATMUL_KERNEL(16, f16)
MATMUL_KERNEL(16, bf16)
MATMUL_KERNEL(8, f16)
MATMUL_KERNEL(8, bf16)
MATMUL_KERNEL(1, f16)
MATMUL_KERNEL(1, bf16)

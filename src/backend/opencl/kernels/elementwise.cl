// SPDX-License-Identifier: Apache-2.0
// Element-wise kernels of the OpenCL backend (OpenCL C 1.2): arithmetic, scaling, the collectives' sums,
// broadcasts, activations, bias, dtype casts and the all-finite check. The semantics are the CPU kernels'
// (src/backend/cpu/kernels/): the launchers in opencl_kernels_elementwise.cpp name the CPU function each
// kernel follows.
//
// Conventions of every kernel here: a tensor argument is (__global T* base, ulong offset in bytes), the
// DeviceSpan of its tensor; `n` counts elements; work-item i handles element i (the launcher rounds the
// global size up to whole work-groups, so each kernel returns for i >= n). float16 and bfloat16 are storage
// types: values are widened exactly to float, computed in float and rounded once, to nearest even, when
// stored. float64 kernels exist only where the device has cl_khr_fp64.

// A float rounded to float16 and widened back: the value a float16 store then load gives.
inline float round_f16(float value) {
  ushort stored;
  vstore_half_rte(value, 0, (__private half*)&stored);
  return vload_half(0, (__private const half*)&stored);
}

inline float round_bf16(float value) { return bf16_to_float(float_to_bf16(value)); }

// Per float dtype: storage type, compute type, load, store, and the rounding of a computed value to the
// dtype (identity for f32 and f64, whose arithmetic already rounds to them).
#define STORAGE_f32 float
#define STORAGE_f64 double
#define STORAGE_f16 half
#define STORAGE_bf16 ushort
#define COMPUTE_f32 float
#define COMPUTE_f64 double
#define COMPUTE_f16 float
#define COMPUTE_bf16 float
#define LOAD_f32(p, i) ((p)[i])
#define LOAD_f64(p, i) ((p)[i])
#define LOAD_f16(p, i) vload_half((i), (p))
#define LOAD_bf16(p, i) bf16_to_float((p)[i])
#define STORE_f32(p, i, v) ((p)[i] = (v))
#define STORE_f64(p, i, v) ((p)[i] = (v))
#define STORE_f16(p, i, v) vstore_half_rte((v), (i), (p))
#define STORE_bf16(p, i, v) ((p)[i] = float_to_bf16(v))
#define ROUND_f32(v) (v)
#define ROUND_f64(v) (v)
#define ROUND_f16(v) round_f16(v)
#define ROUND_bf16(v) round_bf16(v)

// ---- arithmetic on f32 / f64 (backend/cpu/kernels/elementwise.hpp) ----

// op: 0 add, 1 sub, 2 mul, 3 div (ops::Arithmetic's order); plain IEEE arithmetic in T.
#define APPLY(op, a, b) ((op) == 0u ? (a) + (b) : (op) == 1u ? (a) - (b) : (op) == 2u ? (a) * (b) : (a) / (b))

#define ARITHMETIC_KERNELS(S)                                                                                          \
  /* z[i] = x[i] op y[i]; z may alias x or y element for element. */                                                   \
  __kernel void binary_same_##S(uint op, __global const STORAGE_##S* x, ulong x_offset,                                \
                                __global const STORAGE_##S* y, ulong y_offset, __global STORAGE_##S* z,                \
                                ulong z_offset, ulong n) {                                                             \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    TP_AT(STORAGE_##S, z, z_offset)[i] =                                                                               \
        APPLY(op, TP_AT(const STORAGE_##S, x, x_offset)[i], TP_AT(const STORAGE_##S, y, y_offset)[i]);                 \
  }                                                                                                                    \
  /* z[r, c] = x[r, c] op row[c] over x's last dimension of `cols`. */                                                 \
  __kernel void binary_row_##S(uint op, __global const STORAGE_##S* x, ulong x_offset,                                 \
                               __global const STORAGE_##S* row, ulong row_offset, __global STORAGE_##S* z,             \
                               ulong z_offset, ulong n, ulong cols) {                                                  \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    TP_AT(STORAGE_##S, z, z_offset)[i] =                                                                               \
        APPLY(op, TP_AT(const STORAGE_##S, x, x_offset)[i], TP_AT(const STORAGE_##S, row, row_offset)[i % cols]);      \
  }                                                                                                                    \
  /* z[i] = x[i] op y[0], y a scalar tensor read on the device. */                                                     \
  __kernel void binary_scalar_##S(uint op, __global const STORAGE_##S* x, ulong x_offset,                              \
                                  __global const STORAGE_##S* y, ulong y_offset, __global STORAGE_##S* z,              \
                                  ulong z_offset, ulong n) {                                                           \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    TP_AT(STORAGE_##S, z, z_offset)[i] =                                                                               \
        APPLY(op, TP_AT(const STORAGE_##S, x, x_offset)[i], TP_AT(const STORAGE_##S, y, y_offset)[0]);                 \
  }                                                                                                                    \
  /* y[i] = alpha * x[i] (the CPU's scale: binary_scalar mul). */                                                      \
  __kernel void scale_##S(__global const STORAGE_##S* x, ulong x_offset, STORAGE_##S alpha,                            \
                          __global STORAGE_##S* y, ulong y_offset, ulong n) {                                          \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    TP_AT(STORAGE_##S, y, y_offset)[i] = TP_AT(const STORAGE_##S, x, x_offset)[i] * alpha;                             \
  }                                                                                                                    \
  /* out[o, a, i] = alpha * x[o, i] (alpha 1: a copy; 1 / axis: the mean's gradient), for n = outer*axis*inner. */     \
  __kernel void broadcast_axis_##S(__global const STORAGE_##S* x, ulong x_offset, __global STORAGE_##S* out,           \
                                   ulong out_offset, ulong axis, ulong inner, STORAGE_##S alpha, ulong n) {            \
    const size_t j = get_global_id(0);                                                                                 \
    if (j >= n) return;                                                                                                \
    const ulong o = j / (axis * inner);                                                                                \
    const STORAGE_##S value = TP_AT(const STORAGE_##S, x, x_offset)[o * inner + j % inner];                            \
    TP_AT(STORAGE_##S, out, out_offset)[j] = alpha == (STORAGE_##S)1 ? value : alpha * value;                          \
  }                                                                                                                    \
  /* out[r, c] = x[r, c] * s[r]. */                                                                                    \
  __kernel void scale_rows_##S(__global const STORAGE_##S* x, ulong x_offset, __global const STORAGE_##S* s,           \
                               ulong s_offset, __global STORAGE_##S* out, ulong out_offset, ulong cols, ulong n) {     \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    TP_AT(STORAGE_##S, out, out_offset)[i] =                                                                           \
        TP_AT(const STORAGE_##S, x, x_offset)[i] * TP_AT(const STORAGE_##S, s, s_offset)[i / cols];                    \
  }

ARITHMETIC_KERNELS(f32)
#ifdef TP_FP64
ARITHMETIC_KERNELS(f64)
#endif

// ---- kernels on every float dtype (f16 / bf16 computed in float, rounded once per result) ----

// The accumulator of column sums: double as the CPU kernels (float where the device has no float64).
#ifdef TP_FP64
#define ACCUMULATOR double
#else
#define ACCUMULATOR float
#endif

#define FLOAT_KERNELS(S)                                                                                               \
  /* y[i] = y[i] + alpha * x[i], in place (add_scaled; add_scaled_half for 16-bit storage). */                         \
  __kernel void add_scaled_##S(__global STORAGE_##S* y, ulong y_offset, COMPUTE_##S alpha,                             \
                               __global const STORAGE_##S* x, ulong x_offset, ulong n) {                               \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    __global STORAGE_##S* target = TP_AT(STORAGE_##S, y, y_offset);                                                    \
    STORE_##S(target, i, LOAD_##S(target, i) + alpha * LOAD_##S(TP_AT(const STORAGE_##S, x, x_offset), i));            \
  }                                                                                                                    \
  /* out[i] = in0[i] + in1[i] + ... + in{count-1}[i], left to right, each addition rounded to the dtype (the */        \
  /* CPU's sum_across_peers). count is 1..8; unused inputs repeat in0. out may be any input (same view): every */      \
  /* input element is read before out's is written. */                                                                 \
  __kernel void peer_sum_##S(__global STORAGE_##S* out, ulong out_offset, uint count,                                  \
                             __global const STORAGE_##S* in0, ulong offset0,                                           \
                             __global const STORAGE_##S* in1, ulong offset1,                                           \
                             __global const STORAGE_##S* in2, ulong offset2,                                           \
                             __global const STORAGE_##S* in3, ulong offset3,                                           \
                             __global const STORAGE_##S* in4, ulong offset4,                                           \
                             __global const STORAGE_##S* in5, ulong offset5,                                           \
                             __global const STORAGE_##S* in6, ulong offset6,                                           \
                             __global const STORAGE_##S* in7, ulong offset7, ulong n) {                                \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    COMPUTE_##S sum = LOAD_##S(TP_AT(const STORAGE_##S, in0, offset0), i);                                             \
    if (count > 1u) sum = ROUND_##S(sum + LOAD_##S(TP_AT(const STORAGE_##S, in1, offset1), i));                        \
    if (count > 2u) sum = ROUND_##S(sum + LOAD_##S(TP_AT(const STORAGE_##S, in2, offset2), i));                        \
    if (count > 3u) sum = ROUND_##S(sum + LOAD_##S(TP_AT(const STORAGE_##S, in3, offset3), i));                        \
    if (count > 4u) sum = ROUND_##S(sum + LOAD_##S(TP_AT(const STORAGE_##S, in4, offset4), i));                        \
    if (count > 5u) sum = ROUND_##S(sum + LOAD_##S(TP_AT(const STORAGE_##S, in5, offset5), i));                        \
    if (count > 6u) sum = ROUND_##S(sum + LOAD_##S(TP_AT(const STORAGE_##S, in6, offset6), i));                        \
    if (count > 7u) sum = ROUND_##S(sum + LOAD_##S(TP_AT(const STORAGE_##S, in7, offset7), i));                        \
    STORE_##S(TP_AT(STORAGE_##S, out, out_offset), i, sum);                                                            \
  }                                                                                                                    \
  /* y = x <= 0 ? 0 : x (NaN passes through). */                                                                       \
  __kernel void relu_##S(__global const STORAGE_##S* x, ulong x_offset, __global STORAGE_##S* y, ulong y_offset,       \
                         ulong n) {                                                                                    \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    const COMPUTE_##S value = LOAD_##S(TP_AT(const STORAGE_##S, x, x_offset), i);                                      \
    STORE_##S(TP_AT(STORAGE_##S, y, y_offset), i, value <= (COMPUTE_##S)0 ? (COMPUTE_##S)0 : value);                   \
  }                                                                                                                    \
  /* dx = x > 0 ? dy : 0. */                                                                                           \
  __kernel void relu_grad_##S(__global const STORAGE_##S* dy, ulong dy_offset, __global const STORAGE_##S* x,          \
                              ulong x_offset, __global STORAGE_##S* dx, ulong dx_offset, ulong n) {                    \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    const COMPUTE_##S gate = LOAD_##S(TP_AT(const STORAGE_##S, x, x_offset), i);                                       \
    const COMPUTE_##S grad = LOAD_##S(TP_AT(const STORAGE_##S, dy, dy_offset), i);                                     \
    STORE_##S(TP_AT(STORAGE_##S, dx, dx_offset), i, gate > (COMPUTE_##S)0 ? grad : (COMPUTE_##S)0);                    \
  }                                                                                                                    \
  /* y[r, c] = x[r, c] + bias[c]. */                                                                                   \
  __kernel void bias_add_##S(__global const STORAGE_##S* x, ulong x_offset, __global const STORAGE_##S* bias,          \
                             ulong bias_offset, __global STORAGE_##S* y, ulong y_offset, ulong cols, ulong n) {        \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    STORE_##S(TP_AT(STORAGE_##S, y, y_offset), i,                                                                      \
              LOAD_##S(TP_AT(const STORAGE_##S, x, x_offset), i) +                                                     \
                  LOAD_##S(TP_AT(const STORAGE_##S, bias, bias_offset), i % cols));                                    \
  }                                                                                                                    \
  /* dbias[c] = sum over rows of dy[r, c], accumulated in order in double and rounded once (one work-item */           \
  /* per column). */                                                                                                   \
  __kernel void bias_add_grad_##S(__global const STORAGE_##S* dy, ulong dy_offset, __global STORAGE_##S* dbias,        \
                                  ulong dbias_offset, ulong rows, ulong cols) {                                        \
    const size_t c = get_global_id(0);                                                                                 \
    if (c >= cols) return;                                                                                             \
    __global const STORAGE_##S* source = TP_AT(const STORAGE_##S, dy, dy_offset);                                      \
    ACCUMULATOR sum = 0;                                                                                               \
    for (ulong r = 0; r < rows; ++r) sum += (ACCUMULATOR)LOAD_##S(source, r * cols + c);                               \
    STORE_##S(TP_AT(STORAGE_##S, dbias, dbias_offset), c, (COMPUTE_##S)sum);                                           \
  }

FLOAT_KERNELS(f32)
FLOAT_KERNELS(f16)
FLOAT_KERNELS(bf16)
#ifdef TP_FP64
FLOAT_KERNELS(f64)
#endif

// ---- all-finite: out (float32, set to 1 by the launcher first) becomes 0 if any element's exponent bits ----
// are all ones (Inf or NaN). Integer bit tests, so no float64 support is needed for f64 inputs. Each work-item
// strides over the elements; a finder stores 0 atomically (all finders store the same value).
#define ALL_FINITE_KERNEL(NAME, BITS)                                                                                  \
  __kernel void NAME(__global const BITS* x, ulong x_offset, BITS exponent, __global int* out, ulong out_offset,       \
                     ulong n) {                                                                                        \
    __global const BITS* values = TP_AT(const BITS, x, x_offset);                                                      \
    BITS special = 0;                                                                                                  \
    for (size_t i = get_global_id(0); i < n; i += get_global_size(0)) {                                                \
      special |= (BITS)((values[i] & exponent) == exponent);                                                           \
    }                                                                                                                  \
    if (special != 0) atomic_xchg(TP_AT(int, out, out_offset), 0);                                                     \
  }

ALL_FINITE_KERNEL(all_finite_16, ushort)
ALL_FINITE_KERNEL(all_finite_32, uint)
ALL_FINITE_KERNEL(all_finite_64, ulong)

// ---- cast: every pair of dtypes, with the rules of backend/cpu/kernels/cast.hpp ----
// A source element loads as a value of one of five kinds: F (float: f32, f16, bf16 widened exactly),
// D (double), I (int), L (long), U (uchar: u8, and bool normalised to 0 / 1). to_<dst>_<kind> converts a value
// to what STORE_<dst> writes; f16 and bf16 get a float that one more rounding to nearest even turns into the
// correctly rounded result (sources wider than float are narrowed by round-to-odd first, as the CPU does).

// `value` rounded to float by round-to-odd: truncated toward zero, and the last bit set if that was inexact.
#ifdef TP_FP64
inline float round_to_odd_double(double value) {
  const float truncated = convert_float_rtz(value);  // beyond the float range: +-FLT_MAX (odd already)
  if (isnan(value) || (double)truncated == value) return truncated;
  return as_float(as_uint(truncated) | 1u);
}
#endif
inline float round_to_odd_long(long value) {
  const float truncated = convert_float_rtz(value);
  if (convert_long(truncated) == value) return truncated;  // |truncated| <= |value|: in range, exact
  return as_float(as_uint(truncated) | 1u);
}

#define STORAGE_i32 int
#define STORAGE_i64 long
#define STORAGE_u8 uchar
#define STORAGE_bool uchar
#define LOAD_i32(p, i) ((p)[i])
#define LOAD_i64(p, i) ((p)[i])
#define LOAD_u8(p, i) ((p)[i])
#define LOAD_bool(p, i) ((uchar)((p)[i] != 0))
#define STORE_i32(p, i, v) ((p)[i] = (v))
#define STORE_i64(p, i, v) ((p)[i] = (v))
#define STORE_u8(p, i, v) ((p)[i] = (v))
#define STORE_bool(p, i, v) ((p)[i] = (v))
#define KIND_f32 F
#define KIND_f16 F
#define KIND_bf16 F
#define KIND_f64 D
#define KIND_i32 I
#define KIND_i64 L
#define KIND_u8 U
#define KIND_bool U

// To float: round to nearest even (+-inf beyond the range).
#define to_f32_F(v) (v)
#define to_f32_D(v) convert_float_rte(v)
#define to_f32_I(v) convert_float_rte(v)
#define to_f32_L(v) convert_float_rte(v)
#define to_f32_U(v) convert_float(v)
#define to_f64_F(v) convert_double(v)
#define to_f64_D(v) (v)
#define to_f64_I(v) convert_double(v)
#define to_f64_L(v) convert_double_rte(v)
#define to_f64_U(v) convert_double(v)
// To 16-bit floats: a float that STORE_f16 / STORE_bf16 rounds once more, exactly.
#define to_f16_F(v) (v)
#define to_f16_D(v) round_to_odd_double(v)
#define to_f16_I(v) round_to_odd_long(convert_long(v))
#define to_f16_L(v) round_to_odd_long(v)
#define to_f16_U(v) convert_float(v)
#define to_bf16_F(v) to_f16_F(v)
#define to_bf16_D(v) to_f16_D(v)
#define to_bf16_I(v) to_f16_I(v)
#define to_bf16_L(v) to_f16_L(v)
#define to_bf16_U(v) to_f16_U(v)
// Float to integer: truncation toward zero, saturating at the limits, NaN to 0. Integer to integer: saturating.
#define to_i32_F(v) (isnan(v) ? 0 : convert_int_sat_rtz(v))
#define to_i32_D(v) (isnan(v) ? 0 : convert_int_sat_rtz(v))
#define to_i32_I(v) (v)
#define to_i32_L(v) convert_int_sat(v)
#define to_i32_U(v) convert_int(v)
#define to_i64_F(v) (isnan(v) ? 0 : convert_long_sat_rtz(v))
#define to_i64_D(v) (isnan(v) ? 0 : convert_long_sat_rtz(v))
#define to_i64_I(v) convert_long(v)
#define to_i64_L(v) (v)
#define to_i64_U(v) convert_long(v)
#define to_u8_F(v) (isnan(v) ? (uchar)0 : convert_uchar_sat_rtz(v))
#define to_u8_D(v) (isnan(v) ? (uchar)0 : convert_uchar_sat_rtz(v))
#define to_u8_I(v) convert_uchar_sat(v)
#define to_u8_L(v) convert_uchar_sat(v)
#define to_u8_U(v) (v)
// To bool: value != 0 (NaN is true, -0 false), stored as 0 or 1.
#define to_bool_F(v) ((uchar)((v) != 0))
#define to_bool_D(v) ((uchar)((v) != 0))
#define to_bool_I(v) ((uchar)((v) != 0))
#define to_bool_L(v) ((uchar)((v) != 0))
#define to_bool_U(v) ((uchar)((v) != 0))

#define CONVERT_KIND(D, K, v) to_##D##_##K(v)
#define CONVERT(D, K, v) CONVERT_KIND(D, K, v)

#define CAST_KERNEL(S, D)                                                                                              \
  __kernel void cast_##S##_##D(__global const STORAGE_##S* x, ulong x_offset, __global STORAGE_##D* y,                 \
                               ulong y_offset, ulong n) {                                                              \
    const size_t i = get_global_id(0);                                                                                 \
    if (i >= n) return;                                                                                                \
    const __global STORAGE_##S* source = TP_AT(const STORAGE_##S, x, x_offset);                                        \
    STORE_##D(TP_AT(STORAGE_##D, y, y_offset), i, CONVERT(D, KIND_##S, LOAD_##S(source, i)));                          \
  }

// Every source to the seven non-f64 destinations (f64 sources need float64 arithmetic).
#define CAST_FROM(S)                                                                                                   \
  CAST_KERNEL(S, f32)                                                                                                  \
  CAST_KERNEL(S, f16)                                                                                                  \
  CAST_KERNEL(S, bf16)                                                                                                 \
  CAST_KERNEL(S, i32)                                                                                                  \
  CAST_KERNEL(S, i64)                                                                                                  \
  CAST_KERNEL(S, u8)                                                                                                   \
  CAST_KERNEL(S, bool)

CAST_FROM(f32)
CAST_FROM(f16)
CAST_FROM(bf16)
CAST_FROM(i32)
CAST_FROM(i64)
CAST_FROM(u8)
CAST_FROM(bool)
#ifdef TP_FP64
CAST_FROM(f64)
CAST_KERNEL(f32, f64)
CAST_KERNEL(f16, f64)
CAST_KERNEL(bf16, f64)
CAST_KERNEL(f64, f64)
CAST_KERNEL(i32, f64)
CAST_KERNEL(i64, f64)
CAST_KERNEL(u8, f64)
CAST_KERNEL(bool, f64)
#endif

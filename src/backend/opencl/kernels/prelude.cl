// SPDX-License-Identifier: Apache-2.0
// The prelude every program of the OpenCL backend is compiled with (the device's program cache puts it in
// front of each kernels/<program>.cl): the float64 switch, the no-contraction rule, tensor addressing and the
// bfloat16 conversions, defined once.

#if defined(cl_khr_fp64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define TP_FP64 1
#endif
// No fused multiply-adds: each operation rounds as the CPU kernels' plain arithmetic does.
#pragma OPENCL FP_CONTRACT OFF

// A tensor argument is (__global T* base, ulong byte offset): its DeviceSpan.
#define TP_AT(T, base, offset) ((__global T*)((__global uchar*)(base) + (offset)))

// ---- bfloat16: the bit-exact conversions of backend/cpu/kernels/half_convert.hpp ----

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

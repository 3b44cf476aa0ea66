// SPDX-License-Identifier: Apache-2.0
// Kernels the backend's own tests launch (tests/backend/opencl): they exercise enqueue(), kernel() and
// span() without depending on the op kernels.

// data[offset + i] += value for i < count (offset and count in elements).
__kernel void add_scalar_f32(__global float* data, const ulong offset, const float value, const ulong count) {
  const size_t i = get_global_id(0);
  if (i < count) data[offset + i] += value;
}

// Burns time (each work item loops `rounds` times) and then stores `value`: a long command for ordering tests.
__kernel void slow_store_f32(__global float* data, const ulong offset, const float value, const uint rounds) {
  float x = 0.0f;
  for (uint r = 0; r < rounds; ++r) x = x * 0.5f + 1.0f;
  data[offset + get_global_id(0)] = value + (x > 3.0f ? 1.0f : 0.0f);
}

// SPDX-License-Identifier: Apache-2.0
// Counter-based random numbers for the initialisers (OpenCL C 1.2): Philox4x32-10 keyed and laid out exactly as
// backend/cpu/kernels/philox.hpp and random.hpp define, so a seed gives the same values on every backend (bit
// for bit where the arithmetic is exact; within float tolerance where a device's log / sin / cos differ).
//
//   key = {seed low, seed high}; counter = {block low, block high, stream, 0}, stream 0 uniform, 1 normal.
//   uniform f32: 4 elements per block, u = (word >> 8) * 2^-24; f64: 2 per block, u = 53 top bits of hi:lo.
//   normal: 2 per block, Box-Muller in double: u1 = 1 - unit(w0, w1) in (0, 1], u2 = unit(w2, w3); element 2p
//           is r cos(2 pi u2), 2p + 1 is r sin(2 pi u2), r = sqrt(-2 ln u1); then mean + stddev * z.
//   uniform maps u to low + (high - low) * u in double, rounded to T and nudged below high if it reached it.
// Element i of a launch is element (offset + i) of the stream. Without float64 the f32 kernels compute in
// float (the same words, values within float tolerance of the CPU's).

#define PHILOX_MULTIPLIER_0 0xD2511F53u
#define PHILOX_MULTIPLIER_1 0xCD9E8D57u
#define PHILOX_WEYL_0 0x9E3779B9u
#define PHILOX_WEYL_1 0xBB67AE85u

inline uint4 philox4x32_10(uint4 counter, uint2 key) {
  for (int round = 0; round < 10; ++round) {
    if (round != 0) {  // the key is bumped before every round but the first
      key.x += PHILOX_WEYL_0;
      key.y += PHILOX_WEYL_1;
    }
    const uint high0 = mul_hi(PHILOX_MULTIPLIER_0, counter.x);
    const uint low0 = PHILOX_MULTIPLIER_0 * counter.x;
    const uint high1 = mul_hi(PHILOX_MULTIPLIER_1, counter.z);
    const uint low1 = PHILOX_MULTIPLIER_1 * counter.z;
    counter = (uint4)(high1 ^ counter.y ^ key.x, low1, high0 ^ counter.w ^ key.y, low0);
  }
  return counter;
}

// The block of `index` (per_block elements each) in `stream`, as the words w[0..3].
inline uint4 block_words(ulong index, ulong per_block, uint stream, uint seed_low, uint seed_high) {
  const ulong block = index / per_block;
  return philox4x32_10((uint4)((uint)block, (uint)(block >> 32), stream, 0u), (uint2)(seed_low, seed_high));
}

inline uint word(uint4 words, ulong lane) {
  return lane == 0 ? words.x : lane == 1 ? words.y : lane == 2 ? words.z : words.w;
}

#ifdef TP_FP64
// The 53 top bits of high:low as a double in [0, 1).
inline double unit_double(uint high, uint low) {
  const ulong bits = ((ulong)high << 32) | low;
  return (double)(bits >> 11) * 0x1.0p-53;
}

__kernel void uniform_f32(__global float* y, ulong y_offset, float low, float high, uint seed_low, uint seed_high,
                          ulong offset, ulong n) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  const ulong index = offset + i;
  const uint w = word(block_words(index, 4, 0u, seed_low, seed_high), index % 4);
  const double unit = (double)(w >> 8) * 0x1.0p-24;
  const double width = (double)high - (double)low;
  float value = (float)((double)low + width * unit);
  if (value >= high && low < high) value = nextafter(high, low);  // rounding reached the open end
  TP_AT(float, y, y_offset)[i] = value;
}

__kernel void uniform_f64(__global double* y, ulong y_offset, double low, double high, uint seed_low,
                          uint seed_high, ulong offset, ulong n) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  const ulong index = offset + i;
  const uint4 words = block_words(index, 2, 0u, seed_low, seed_high);
  const ulong lane = index % 2;
  const double unit = unit_double(word(words, 2 * lane), word(words, 2 * lane + 1));
  double value = low + (high - low) * unit;
  if (value >= high && low < high) value = nextafter(high, low);
  TP_AT(double, y, y_offset)[i] = value;
}

inline double standard_normal(ulong index, uint seed_low, uint seed_high) {
  const uint4 words = block_words(index, 2, 1u, seed_low, seed_high);
  const double u1 = 1.0 - unit_double(words.x, words.y);  // (0, 1]: log(u1) is finite
  const double u2 = unit_double(words.z, words.w);
  const double radius = sqrt(-2.0 * log(u1));
  const double angle = 2.0 * M_PI * u2;
  return index % 2 == 0 ? radius * cos(angle) : radius * sin(angle);
}

__kernel void normal_f32(__global float* y, ulong y_offset, float mean, float stddev, uint seed_low, uint seed_high,
                         ulong offset, ulong n) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  const double z = standard_normal(offset + i, seed_low, seed_high);
  TP_AT(float, y, y_offset)[i] = (float)((double)mean + (double)stddev * z);
}

__kernel void normal_f64(__global double* y, ulong y_offset, double mean, double stddev, uint seed_low,
                         uint seed_high, ulong offset, ulong n) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  TP_AT(double, y, y_offset)[i] = mean + stddev * standard_normal(offset + i, seed_low, seed_high);
}

#else  // no float64: the same words, float arithmetic

__kernel void uniform_f32(__global float* y, ulong y_offset, float low, float high, uint seed_low, uint seed_high,
                          ulong offset, ulong n) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  const ulong index = offset + i;
  const uint w = word(block_words(index, 4, 0u, seed_low, seed_high), index % 4);
  const float unit = (float)(w >> 8) * 0x1.0p-24f;  // exact
  float value = low + (high - low) * unit;
  if (value >= high && low < high) value = nextafter(high, low);
  TP_AT(float, y, y_offset)[i] = value;
}

__kernel void normal_f32(__global float* y, ulong y_offset, float mean, float stddev, uint seed_low, uint seed_high,
                         ulong offset, ulong n) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  const ulong index = offset + i;
  const uint4 words = block_words(index, 2, 1u, seed_low, seed_high);
  const float u1 = 1.0f - (float)(words.x >> 8) * 0x1.0p-24f;  // (0, 1]
  const float u2 = (float)(words.z >> 8) * 0x1.0p-24f;
  const float radius = sqrt(-2.0f * log(u1));
  const float angle = 2.0f * M_PI_F * u2;
  const float z = index % 2 == 0 ? radius * cos(angle) : radius * sin(angle);
  TP_AT(float, y, y_offset)[i] = mean + stddev * z;
}

#endif

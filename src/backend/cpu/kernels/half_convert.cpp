// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/half_convert.hpp"

#include <cstdint>
#include <cstring>
#include <memory>

#include "backend/cpu/kernels/isa_clones.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace tp::backend::cpu::detail {

const float* half_to_float_table() {
  // Built once (thread-safe static initialisation), 256 KiB, from the bit-exact core conversion.
  static const std::unique_ptr<float[]> table = [] {
    auto values = std::make_unique<float[]>(65536);
    for (std::uint32_t bits = 0; bits < 65536; ++bits) {
      values[bits] = half_bits_to_float(static_cast<std::uint16_t>(bits));
    }
    return values;
  }();
  return table.get();
}

namespace {

const unsigned char* bytes(const void* pointer) { return static_cast<const unsigned char*>(pointer); }
unsigned char* bytes(void* pointer) { return static_cast<unsigned char*>(pointer); }

#if defined(__x86_64__)
// F16C is read from CPUID leaf 1 (ECX bit 29) rather than __builtin_cpu_supports("f16c"), which clang before
// 15 rejects; __builtin_cpu_supports("avx") also checks that the OS saves the AVX registers.
bool has_f16c() {
  static const bool supported = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return supported;
}

// Blocks of 8; returns how many elements were converted. vcvtph2ps widens exactly (a signalling NaN comes
// back quiet, as the core conversion does); vcvtps2ph with round-to-nearest-even rounds once, ignores FTZ for
// its float16 results, and maps float32 denormals (all far below float16's range) to +-0 whether or not DAZ
// treats them as zero. The tests compare both with the core functions bit for bit.
__attribute__((target("avx,f16c"))) std::int64_t half_to_float_f16c(const unsigned char* src, unsigned char* dst,
                                                                    std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + 4 * i), _mm256_cvtph_ps(half));
  }
  return i;
}

__attribute__((target("avx,f16c"))) std::int64_t float_to_half_f16c(const unsigned char* src, unsigned char* dst,
                                                                    std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 single = _mm256_loadu_ps(reinterpret_cast<const float*>(src + 4 * i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), _mm256_cvtps_ph(single, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
#else
bool has_f16c() { return false; }
std::int64_t half_to_float_f16c(const unsigned char*, unsigned char*, std::int64_t) { return 0; }
std::int64_t float_to_half_f16c(const unsigned char*, unsigned char*, std::int64_t) { return 0; }
#endif

template <typename From, typename To, typename Convert>
void convert_tail(const unsigned char* src, unsigned char* dst, std::int64_t begin, std::int64_t n, Convert convert) {
  for (std::int64_t i = begin; i < n; ++i) {
    From value;
    std::memcpy(&value, src + i * static_cast<std::int64_t>(sizeof(From)), sizeof(From));
    const To result = convert(value);
    std::memcpy(dst + i * static_cast<std::int64_t>(sizeof(To)), &result, sizeof(To));
  }
}

// The bfloat16 conversions over typed, aligned arrays: the branch-free inline formulas vectorise, one clone per
// instruction set (isa_clones.hpp); integer arithmetic only, so every clone gives the same bits.
TP_ISA_CLONES void bfloat16_to_float_loop(const BFloat16* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = widen(src[i]);
}

TP_ISA_CLONES void float_to_bfloat16_loop(const float* src, BFloat16* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = narrow<BFloat16>(src[i]);
}

template <typename T>
bool aligned_for(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % alignof(T) == 0;
}

}  // namespace

void half_to_float(const void* src, void* dst, std::int64_t n) {
  const std::int64_t done = has_f16c() ? half_to_float_f16c(bytes(src), bytes(dst), n) : 0;
  const float* table = half_to_float_table();
  convert_tail<Half, float>(bytes(src), bytes(dst), done, n, [table](Half value) { return widen(value, table); });
}

void float_to_half(const void* src, void* dst, std::int64_t n) {
  const std::int64_t done = has_f16c() ? float_to_half_f16c(bytes(src), bytes(dst), n) : 0;
  convert_tail<float, Half>(bytes(src), bytes(dst), done, n, [](float value) { return narrow<Half>(value); });
}

void bfloat16_to_float(const void* src, void* dst, std::int64_t n) {
  if (aligned_for<BFloat16>(src) && aligned_for<float>(dst)) {
    bfloat16_to_float_loop(static_cast<const BFloat16*>(src), static_cast<float*>(dst), n);
    return;
  }
  convert_tail<BFloat16, float>(bytes(src), bytes(dst), 0, n, [](BFloat16 value) { return widen(value); });
}

void float_to_bfloat16(const void* src, void* dst, std::int64_t n) {
  if (aligned_for<float>(src) && aligned_for<BFloat16>(dst)) {
    float_to_bfloat16_loop(static_cast<const float*>(src), static_cast<BFloat16*>(dst), n);
    return;
  }
  convert_tail<float, BFloat16>(bytes(src), bytes(dst), 0, n, [](float value) { return narrow<BFloat16>(value); });
}

}  // namespace tp::backend::cpu::detail

// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the backend conformance suite compares with: one tolerance table per dtype (the same for every
// backend), host encodings of every dtype that do not go through our kernels or tp::Half (so a float16 or
// bfloat16 result is checked against an independent round-to-nearest-even), tensors built from and read back
// to float64 values, and the comparison that names the first mismatching elements.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/core/dtype.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::testing {

static_assert(std::numeric_limits<long double>::digits >= 64,
              "the cast references need a long double that holds every int64 and double exactly");

// A result r is close to its float64 reference e when |r - e| <= absolute + relative * scale, where scale is
// |e| for one rounded operation and, for a result summed from many terms (matmul, reductions, bias gradients,
// a loss of large logits), the sum of the terms' magnitudes: what a correct summation in any order may lose
// grows with it, not with the (possibly cancelled) result. One table for every backend: a backend that needs
// a looser entry has a bug to fix, not a tolerance to widen.
struct Tolerance {
  double relative = 0;
  double absolute = 0;
};

inline Tolerance tolerance_of(DType dtype) {
  switch (dtype) {
    case DType::f64: return {1e-12, 1e-13};
    case DType::f32:  // ~100 ulps: accumulation in another order, OpenCL's few-ulp exp / log / divide
      return {1e-5, 1e-6};
    case DType::f16:  // one rounding is at most 2^-11 relative
      return {1e-3, 1e-5};
    case DType::bf16:  // one rounding is at most 2^-8 relative
      return {8e-3, 1e-5};
    default:  // integers and bool: exact
      return {0, 0};
  }
}

// The binary16 / bfloat16 layouts: 1 sign bit, `exponent_bits`, `mantissa_bits`.
struct Format16 {
  int mantissa_bits;
  int exponent_bits;
};
inline constexpr Format16 kFloat16{10, 5};
inline constexpr Format16 kBFloat16{7, 8};

// `value` rounded to the nearest `format` value, ties to even, in one step from the exact value: +-Inf past the
// largest finite value's rounding range, subnormals below the smallest normal, -0 kept, NaN quiet with its sign.
inline std::uint16_t round_to_format(long double value, Format16 format) {
  const int mantissa_bits = format.mantissa_bits;
  const int bias = (1 << (format.exponent_bits - 1)) - 1;
  const std::uint16_t sign = std::signbit(value) ? std::uint16_t{0x8000} : std::uint16_t{0};
  const auto exponent_mask = static_cast<std::uint16_t>(((1U << format.exponent_bits) - 1U) << mantissa_bits);
  if (std::isnan(value)) return sign | exponent_mask | static_cast<std::uint16_t>(1U << (mantissa_bits - 1));
  const long double magnitude = std::fabs(value);
  if (std::isinf(magnitude)) return sign | exponent_mask;
  if (magnitude == 0) return sign;
  int exponent = 0;
  (void)std::frexp(magnitude, &exponent);             // magnitude = f 2^exponent, f in [0.5, 1)
  const int lead = std::max(exponent - 1, 1 - bias);  // the leading bit's power, at least the least normal's
  // Steps of the quantum 2^(lead - mantissa_bits); nearbyint rounds ties to even (the default rounding mode).
  const long double steps = std::nearbyint(std::ldexp(magnitude, mantissa_bits - lead));
  const long double rounded = std::ldexp(steps, lead - mantissa_bits);
  if (rounded >= std::ldexp(1.0L, bias + 1)) return sign | exponent_mask;  // rounded past the largest finite
  if (rounded < std::ldexp(1.0L, 1 - bias)) return sign | static_cast<std::uint16_t>(steps);  // subnormal or 0
  (void)std::frexp(rounded, &exponent);
  const auto mantissa =
      static_cast<std::uint16_t>(std::ldexp(rounded, mantissa_bits - (exponent - 1)) - std::ldexp(1.0L, mantissa_bits));
  return sign | static_cast<std::uint16_t>((exponent - 1 + bias) << mantissa_bits) | mantissa;
}

inline long double value_of_format(std::uint16_t bits, Format16 format) {
  const int mantissa_bits = format.mantissa_bits;
  const int bias = (1 << (format.exponent_bits - 1)) - 1;
  const unsigned field = (bits >> mantissa_bits) & ((1U << format.exponent_bits) - 1U);
  const unsigned mantissa = bits & ((1U << mantissa_bits) - 1U);
  long double magnitude = 0;
  if (field == (1U << format.exponent_bits) - 1U) {
    magnitude =
        mantissa == 0 ? std::numeric_limits<long double>::infinity() : std::numeric_limits<long double>::quiet_NaN();
  } else if (field == 0) {
    magnitude = std::ldexp(static_cast<long double>(mantissa), 1 - bias - mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<long double>(mantissa + (1U << mantissa_bits)),
                           static_cast<int>(field) - bias - mantissa_bits);
  }
  return (bits & 0x8000U) != 0 ? -magnitude : magnitude;
}

// Stores `value` as one element of `dtype` at `out`: floats rounded to nearest even (f32 and f64 by the
// compiler's correctly rounded conversion), integers as given (callers pass values in range), bool as the byte
// `value` (so non-canonical true bytes such as 2 can be fed).
inline void encode_element(long double value, DType dtype, unsigned char* out) {
  switch (dtype) {
    case DType::f32: {
      const auto element = static_cast<float>(value);
      std::memcpy(out, &element, sizeof element);
      return;
    }
    case DType::f64: {
      const auto element = static_cast<double>(value);
      std::memcpy(out, &element, sizeof element);
      return;
    }
    case DType::f16:
    case DType::bf16: {
      const std::uint16_t element = round_to_format(value, dtype == DType::f16 ? kFloat16 : kBFloat16);
      std::memcpy(out, &element, sizeof element);
      return;
    }
    case DType::i32: {
      const auto element = static_cast<std::int32_t>(value);
      std::memcpy(out, &element, sizeof element);
      return;
    }
    case DType::i64: {
      const auto element = static_cast<std::int64_t>(value);
      std::memcpy(out, &element, sizeof element);
      return;
    }
    case DType::u8:
    case DType::boolean: *out = static_cast<unsigned char>(value); return;
  }
}

// The element of `dtype` at `bytes` (a bool as its byte, 0..255).
inline long double decode_element(const unsigned char* bytes, DType dtype) {
  switch (dtype) {
    case DType::f32: {
      float element = 0;
      std::memcpy(&element, bytes, sizeof element);
      return element;
    }
    case DType::f64: {
      double element = 0;
      std::memcpy(&element, bytes, sizeof element);
      return element;
    }
    case DType::f16:
    case DType::bf16: {
      std::uint16_t element = 0;
      std::memcpy(&element, bytes, sizeof element);
      return value_of_format(element, dtype == DType::f16 ? kFloat16 : kBFloat16);
    }
    case DType::i32: {
      std::int32_t element = 0;
      std::memcpy(&element, bytes, sizeof element);
      return element;
    }
    case DType::i64: {
      std::int64_t element = 0;
      std::memcpy(&element, bytes, sizeof element);
      return static_cast<long double>(element);
    }
    case DType::u8:
    case DType::boolean: return *bytes;
  }
  return 0;
}

// `value` as stored in `dtype` and read back: the representable value the tensor will hold.
inline double representable(double value, DType dtype) {
  unsigned char bytes[8];
  encode_element(value, dtype, bytes);
  return static_cast<double>(decode_element(bytes, dtype));
}

inline std::vector<unsigned char> encode(const std::vector<long double>& values, DType dtype) {
  std::vector<unsigned char> bytes(values.size() * size_of(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) encode_element(values[i], dtype, bytes.data() + i * size_of(dtype));
  return bytes;
}

// A tensor of `dtype` on `device` holding `values` (rounded to the dtype as encode_element does).
inline Tensor upload_exact(const std::vector<long double>& values, const Shape& shape, DType dtype,
                           device::Device& device) {
  check_element_count(values.size(), shape);
  const std::vector<unsigned char> bytes = encode(values, dtype);
  return Tensor::from_host(bytes.data(), shape, dtype, device);
}

inline Tensor upload(const std::vector<double>& values, const Shape& shape, DType dtype, device::Device& device) {
  return upload_exact(std::vector<long double>(values.begin(), values.end()), shape, dtype, device);
}

inline std::vector<unsigned char> read_bytes(const Tensor& tensor) {
  std::vector<unsigned char> bytes(tensor.nbytes());
  tensor.copy_to_host(bytes.data());
  return bytes;
}

inline std::vector<double> download(const Tensor& tensor) {
  const std::vector<unsigned char> bytes = read_bytes(tensor);
  const std::size_t size = size_of(tensor.dtype());
  std::vector<double> values(bytes.size() / size);
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<double>(decode_element(bytes.data() + i * size, tensor.dtype()));
  }
  return values;
}

// `count` values uniform in [low, high), each representable in `dtype`.
inline std::vector<double> random_values(DType dtype, std::size_t count, std::uint32_t seed, double low = -1.0,
                                         double high = 1.0) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<double> distribution(low, high);
  std::vector<double> values(count);
  for (double& value : values) value = representable(distribution(engine), dtype);
  return values;
}

// Expects actual within `tolerance` of expected, element by element (scale: |expected| when null, see
// Tolerance). NaN is expected exactly where NaN is found. Names `what` and the first mismatches.
inline void expect_close(std::string_view what, const std::vector<double>& actual, const std::vector<double>& expected,
                         Tolerance tolerance, const std::vector<double>* scale = nullptr) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int mismatches = 0;
  double worst = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double magnitude = scale != nullptr ? (*scale)[i] : std::fabs(expected[i]);
    const double allowed = tolerance.absolute + tolerance.relative * magnitude;
    const double error = std::fabs(actual[i] - expected[i]);
    const bool ok = std::isnan(expected[i]) ? std::isnan(actual[i]) : (actual[i] == expected[i] || error <= allowed);
    if (ok) continue;
    worst = std::max(worst, std::isnan(error) ? std::numeric_limits<double>::infinity() : error / allowed);
    if (mismatches++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected " << expected[i]
                    << " (allowed error " << allowed << ")";
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << actual.size()
                           << " elements out of tolerance, the worst by " << worst << "x";
}

// The inputs' seed: TP_TEST_SEED=<n> replays a failure (every failure message prints the seed in use).
inline std::uint32_t test_seed() {
  const char* text = std::getenv("TP_TEST_SEED");
  return text != nullptr ? static_cast<std::uint32_t>(std::strtoul(text, nullptr, 10)) : 20261203U;
}

// Runs `action`, expects tp::InvalidArgument, and checks that every fragment appears in its message.
template <typename Action>
void expect_invalid(Action action, const std::vector<std::string>& fragments) {
  try {
    action();
    ADD_FAILURE() << "no tp::InvalidArgument thrown (expected one mentioning " << fragments.front() << ")";
  } catch (const InvalidArgument& error) {
    const std::string text = error.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(text.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << text;
    }
  }
}

// Whether a tp::DeviceError says the device cannot run float64 (an OpenCL device without cl_khr_fp64): the
// one error on which a float64 case is skipped instead of failed.
inline bool says_no_float64(const DeviceError& error) {
  std::string text = error.what();
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text.find("float64") != std::string::npos || text.find("fp64") != std::string::npos;
}

}  // namespace tp::backend::testing

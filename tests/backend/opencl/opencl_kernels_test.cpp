// SPDX-License-Identifier: Apache-2.0
// The OpenCL kernels where the cross-backend suite does not look closely: bit-level agreement with the CPU
// kernels (Philox streams, casts at rounding and saturation edges, 16-bit add_scaled), matmul transposes
// (CLBlast's and the 16-bit kernels'), that a 16-bit matmul allocates no device memory, the peers' sum with more
// inputs than one kernel pass takes, and the device-read apply flag of the optimizers.
// Each case runs the same op on cpu:0 and opencl:0 and compares; all skip when the process has no opencl device.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/support/backend_params.hpp"
#include "ops/peer_sum.hpp"
#include "tensorpool/core/half.hpp"
#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/ops/cast.hpp"
#include "tensorpool/ops/elementwise.hpp"
#include "tensorpool/ops/init.hpp"
#include "tensorpool/ops/linalg.hpp"
#include "tensorpool/ops/optimizer.hpp"

namespace tp {
namespace {

using device::Device;
using device::DeviceManager;

std::vector<std::uint8_t> bytes_of(const Tensor& tensor) {
  std::vector<std::uint8_t> bytes(tensor.nbytes());
  tensor.copy_to_host(bytes.data());
  return bytes;
}

template <typename T>
Tensor make(const std::vector<T>& values, const Shape& shape, DType dtype, Device& device) {
  return Tensor::from_host(values.data(), shape, dtype, device);
}

// Whether element `index` of two tensors' bytes (dtype `dtype`) is the same value: equal bits, or NaN in both
// (payloads may differ between the backends' conversions).
bool same_element(const std::vector<std::uint8_t>& left, const std::vector<std::uint8_t>& right, DType dtype,
                  std::size_t index) {
  const std::size_t size = size_of(dtype);
  const std::uint8_t* a = left.data() + index * size;
  const std::uint8_t* b = right.data() + index * size;
  if (std::memcmp(a, b, size) == 0) return true;
  std::uint64_t bits_a = 0, bits_b = 0;
  std::memcpy(&bits_a, a, size);
  std::memcpy(&bits_b, b, size);
  switch (dtype) {
    case DType::f32:
      return std::isnan(std::bit_cast<float>(static_cast<std::uint32_t>(bits_a))) &&
             std::isnan(std::bit_cast<float>(static_cast<std::uint32_t>(bits_b)));
    case DType::f64: return std::isnan(std::bit_cast<double>(bits_a)) && std::isnan(std::bit_cast<double>(bits_b));
    case DType::f16: return (bits_a & 0x7FFF) > 0x7C00 && (bits_b & 0x7FFF) > 0x7C00;
    case DType::bf16: return (bits_a & 0x7FFF) > 0x7F80 && (bits_b & 0x7FFF) > 0x7F80;
    default: return false;
  }
}

// Element `index` as hexadecimal bytes, most significant first.
std::string hex_bytes(const std::vector<std::uint8_t>& bytes, DType dtype, std::size_t index) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text = "0x";
  const std::size_t size = size_of(dtype);
  for (std::size_t byte = size; byte-- > 0;) {
    const std::uint8_t value = bytes[index * size + byte];
    text += kDigits[value >> 4];
    text += kDigits[value & 15];
  }
  return text;
}

void expect_same_bits(const Tensor& expected, const Tensor& actual, const std::string& what) {
  ASSERT_EQ(expected.dtype(), actual.dtype()) << what;
  const std::vector<std::uint8_t> left = bytes_of(expected);
  const std::vector<std::uint8_t> right = bytes_of(actual);
  ASSERT_EQ(left.size(), right.size()) << what;
  for (std::size_t index = 0; index < static_cast<std::size_t>(expected.num_elements()); ++index) {
    ASSERT_TRUE(same_element(left, right, expected.dtype(), index))
        << what << ": element " << index << " differs: " << hex_bytes(left, expected.dtype(), index) << " expected, "
        << hex_bytes(right, expected.dtype(), index) << " on " << actual.device().name();
  }
}

// Element values of a float tensor of any float dtype, widened to double on the host.
std::vector<double> values_of(const Tensor& tensor) {
  const Tensor wide = ops::cast(tensor, DType::f64);
  return wide.to_vector<double>();
}

void expect_near_values(const Tensor& expected, const Tensor& actual, double relative, const std::string& what) {
  const std::vector<double> left = values_of(expected);
  const std::vector<double> right = values_of(actual);
  ASSERT_EQ(left.size(), right.size()) << what;
  for (std::size_t index = 0; index < left.size(); ++index) {
    ASSERT_NEAR(left[index], right[index], relative * (1.0 + std::abs(left[index]))) << what << " at " << index;
  }
}

class OpenClKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend::testing::prepare_backend_environment();
    const std::vector<Device*> devices = DeviceManager::instance().devices(device::DeviceKind::opencl);
    if (devices.empty()) {
      GTEST_SKIP() << "no opencl device in this process (build without OpenCL, no ICD such as "
                      "pocl-opencl-icd, or TP_VISIBLE_DEVICES hides it)";
    }
    gpu_ = devices.front();
    cpu_ = &DeviceManager::instance().device("cpu:0");
  }

  Device* cpu_ = nullptr;
  Device* gpu_ = nullptr;
};

// The seeded initialisers give the CPU's values: uniform bit for bit (the same words and the same double
// arithmetic), normal within float rounding of the device's log / sin / cos.
TEST_F(OpenClKernelsTest, PhiloxStreamsMatchTheCpu) {
  for (const std::uint64_t seed : {std::uint64_t{0}, std::uint64_t{42}, std::uint64_t{0xDEADBEEF12345678ULL}}) {
    for (const std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{5}, std::uint64_t{1} << 33}) {
      const std::string what = "seed " + std::to_string(seed) + " offset " + std::to_string(offset);
      for (const DType dtype : {DType::f32, DType::f64}) {
        Tensor on_cpu = Tensor::empty(Shape{1027}, dtype, *cpu_);
        Tensor on_gpu = Tensor::empty(Shape{1027}, dtype, *gpu_);
        ops::uniform(on_cpu, -2.0, 3.0, seed, offset);
        ops::uniform(on_gpu, -2.0, 3.0, seed, offset);
        expect_same_bits(on_cpu, on_gpu, "uniform " + std::string(name_of(dtype)) + " " + what);
        ops::normal(on_cpu, 0.5, 2.0, seed, offset);
        ops::normal(on_gpu, 0.5, 2.0, seed, offset);
        expect_near_values(on_cpu, on_gpu, dtype == DType::f32 ? 1e-6 : 1e-13,
                           "normal " + std::string(name_of(dtype)) + " " + what);
      }
    }
    Tensor kernel_cpu = Tensor::empty(Shape{37, 91}, DType::f32, *cpu_);
    Tensor kernel_gpu = Tensor::empty(Shape{37, 91}, DType::f32, *gpu_);
    ops::glorot_uniform(kernel_cpu, seed);
    ops::glorot_uniform(kernel_gpu, seed);
    expect_same_bits(kernel_cpu, kernel_gpu, "glorot_uniform seed " + std::to_string(seed));
  }
}

// Casts at the edges: float16 / bfloat16 ties to even, overflow, subnormals and NaN; sources wider than float
// that a double rounding would get wrong; saturating and NaN float-to-integer; bool normalisation. Every pair
// is compared bit for bit with the CPU's cast.
TEST_F(OpenClKernelsTest, CastsMatchTheCpuAtRoundingAndSaturationEdges) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> floats = {0.0F,
                                     -0.0F,
                                     1.0F,
                                     -2.5F,
                                     2.5F,
                                     0.5F,
                                     -0.5F,
                                     255.9F,
                                     256.0F,
                                     -1.0F,
                                     65504.0F,
                                     65519.0F,
                                     65520.0F,
                                     1e5F,
                                     std::bit_cast<float>(0x3F808000U),  // bfloat16 tie, even below: rounds down
                                     std::bit_cast<float>(0x3F818000U),  // bfloat16 tie, odd below: rounds up
                                     std::bit_cast<float>(0x3F801000U),  // float16 tie (1 + 2^-11): rounds down
                                     std::bit_cast<float>(0x3F803000U),  // float16 tie (1 + 3 * 2^-11): rounds up
                                     std::ldexp(1.0F, -24),
                                     std::ldexp(1.0F, -25),
                                     3 * std::ldexp(1.0F, -26),
                                     std::ldexp(1.0F, -14) * 0.75F,
                                     3e9F,
                                     -3e9F,
                                     1e19F,
                                     -1e19F,
                                     9.3e18F,
                                     nan,
                                     -nan,
                                     inf,
                                     -inf,
                                     std::numeric_limits<float>::max(),
                                     std::bit_cast<float>(0x7F7FFFFFU),
                                     std::bit_cast<float>(0xFF800001U)};
  const std::vector<double> doubles = {
      1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),  // above a float16 tie only beyond float's precision
      1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -45),   // the same for bfloat16
      -(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)),
      1e300,
      -1e300,
      1e-300,
      3.4028235677973366e38,
      std::numeric_limits<double>::quiet_NaN(),
      2147483647.5,
      -2147483648.9,
      1e19,
      -0.0,
      255.5,
      0.1};
  const std::vector<std::int64_t> longs = {0,
                                           1,
                                           -1,
                                           (std::int64_t{1} << 53) + 1,
                                           (std::int64_t{1} << 24) + 1,
                                           (std::int64_t{1} << 11) + 1 + (std::int64_t{1} << 40),
                                           std::numeric_limits<std::int64_t>::min(),
                                           std::numeric_limits<std::int64_t>::max(),
                                           4294967296LL,
                                           -300,
                                           300};
  const std::vector<std::int32_t> ints = {0, 1, -1, 16777217, 2147483647, -2147483647 - 1, 255, 256, -3, 65520};
  const std::vector<std::uint8_t> bytes = {0, 1, 2, 127, 128, 255};

  const std::vector<DType> all = {DType::f32, DType::f16, DType::bf16, DType::f64,
                                  DType::i32, DType::i64, DType::u8,   DType::boolean};
  struct Source {
    DType dtype;
    Tensor cpu, gpu;
  };
  std::vector<Source> sources;
  const auto add = [&](const auto& values, DType dtype) {
    const Shape shape{static_cast<std::int64_t>(values.size())};
    sources.push_back({dtype, make(values, shape, dtype, *cpu_), make(values, shape, dtype, *gpu_)});
  };
  add(floats, DType::f32);
  add(doubles, DType::f64);
  add(longs, DType::i64);
  add(ints, DType::i32);
  add(bytes, DType::u8);
  add(bytes, DType::boolean);  // raw bytes 2..255 are true
  // 16-bit sources: the float values rounded by the CPU, then the same bits on both devices.
  for (const DType half : {DType::f16, DType::bf16}) {
    const Tensor rounded =
        ops::cast(make(floats, Shape{static_cast<std::int64_t>(floats.size())}, DType::f32, *cpu_), half);
    const std::vector<std::uint8_t> bits = bytes_of(rounded);
    sources.push_back({half, Tensor::from_host(bits.data(), rounded.shape(), half, *cpu_),
                       Tensor::from_host(bits.data(), rounded.shape(), half, *gpu_)});
  }
  for (const Source& source : sources) {
    for (const DType to : all) {
      const Tensor expected = ops::cast(source.cpu, to);
      const Tensor actual = ops::cast(source.gpu, to);
      expect_same_bits(expected, actual, std::string(name_of(source.dtype)) + " -> " + std::string(name_of(to)));
    }
  }
}

// float32 subnormals convert exactly (the CPU streams run with denormals-are-zero, so they are compared with
// the host's conversion here rather than with cpu:0's).
TEST_F(OpenClKernelsTest, CastsKeepFloatSubnormals) {
  const std::vector<float> subnormals = {1e-40F, -1e-40F, std::numeric_limits<float>::denorm_min()};
  const Tensor x = make(subnormals, Shape{3}, DType::f32, *gpu_);
  const std::vector<double> wide = ops::cast(x, DType::f64).to_vector<double>();
  const std::vector<std::uint8_t> truth = bytes_of(ops::cast(x, DType::boolean));
  for (std::size_t index = 0; index < subnormals.size(); ++index) {
    EXPECT_EQ(wide[index], static_cast<double>(subnormals[index])) << index;
    EXPECT_EQ(truth[index], 1) << index;
  }
}

// y += alpha x on 16-bit storage: one float32 addition rounded once, as the CPU (bit for bit).
TEST_F(OpenClKernelsTest, HalfAddScaledRoundsOnceLikeTheCpu) {
  std::mt19937 engine(7);
  std::uniform_real_distribution<float> distribution(-4.0F, 4.0F);
  std::vector<float> y(999), x(999);
  for (float& value : y) value = distribution(engine);
  for (float& value : x) value = distribution(engine);
  x[0] = std::bit_cast<float>(0x3F808000U);
  y[0] = 0.0F;
  for (const DType half : {DType::f16, DType::bf16}) {
    const Shape shape{999};
    Tensor y_cpu = ops::cast(make(y, shape, DType::f32, *cpu_), half);
    Tensor x_cpu = ops::cast(make(x, shape, DType::f32, *cpu_), half);
    Tensor y_gpu = y_cpu.to(*gpu_);
    Tensor x_gpu = x_cpu.to(*gpu_);
    ops::add_scaled(y_cpu, 0.3, x_cpu);
    ops::add_scaled(y_gpu, 0.3, x_gpu);
    expect_same_bits(y_cpu, y_gpu, std::string("add_scaled ") + std::string(name_of(half)));
  }
}

// op(A) op(B) for every transpose pair: float32 and float64 through CLBlast (a small and a larger shape: CLBlast
// picks different kernels), float16 and bfloat16 through matmul.cl (within one tile, and many partial tiles);
// an empty k gives zeros.
TEST_F(OpenClKernelsTest, MatmulTransposesMatchTheCpu) {
  struct Size {
    std::int64_t m, n, k;
  };
  for (const Size size : {Size{7, 5, 3}, Size{130, 70, 260}, Size{4, 6, 0}}) {
    for (const bool transpose_a : {false, true}) {
      for (const bool transpose_b : {false, true}) {
        const Shape a_shape = transpose_a ? Shape{size.k, size.m} : Shape{size.m, size.k};
        const Shape b_shape = transpose_b ? Shape{size.n, size.k} : Shape{size.k, size.n};
        Tensor a = Tensor::empty(a_shape, DType::f32, *cpu_);
        Tensor b = Tensor::empty(b_shape, DType::f32, *cpu_);
        ops::uniform(a, -1.0, 1.0, 11);
        ops::uniform(b, -1.0, 1.0, 12);
        for (const DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
          const Tensor a_cpu = ops::cast(a, dtype);
          const Tensor b_cpu = ops::cast(b, dtype);
          const ops::MatmulOptions options{.transpose_a = transpose_a, .transpose_b = transpose_b};
          const Tensor expected = ops::matmul(a_cpu, b_cpu, options);
          const Tensor actual = ops::matmul(a_cpu.to(*gpu_), b_cpu.to(*gpu_), options);
          // 16-bit results: the float32 sums agree to float rounding, so the rounded results agree within one
          // 16-bit ulp where a sum falls next to a rounding boundary.
          const double tolerance = dtype == DType::bf16 ? 1e-2 : dtype == DType::f16 ? 1e-3 : 1e-5;
          expect_near_values(expected, actual, tolerance,
                             "matmul " + std::string(name_of(dtype)) + " " + std::to_string(size.m) + "x" +
                                 std::to_string(size.n) + "x" + std::to_string(size.k) + (transpose_a ? " aT" : "") +
                                 (transpose_b ? " bT" : ""));
        }
      }
    }
  }
}

// A 16-bit product reads its operands where they lie: it makes no allocation from the device's memory stack
// (float32 copies of the operands would sit outside a step's memory plan), for every transpose pair, a shape
// with partial tiles and an empty inner dimension.
TEST_F(OpenClKernelsTest, HalfMatmulAllocatesNothingOnTheDevice) {
  struct Size {
    std::int64_t m, n, k;
  };
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const Size size : {Size{37, 21, 45}, Size{3, 4, 0}}) {
      for (const bool transpose_a : {false, true}) {
        for (const bool transpose_b : {false, true}) {
          const Shape a_shape = transpose_a ? Shape{size.k, size.m} : Shape{size.m, size.k};
          const Shape b_shape = transpose_b ? Shape{size.n, size.k} : Shape{size.k, size.n};
          Tensor a = Tensor::empty(a_shape, DType::f32, *cpu_);
          Tensor b = Tensor::empty(b_shape, DType::f32, *cpu_);
          ops::uniform(a, -1.0, 1.0, 21);
          ops::uniform(b, -1.0, 1.0, 22);
          const Tensor a_gpu = ops::cast(a, dtype).to(*gpu_);
          const Tensor b_gpu = ops::cast(b, dtype).to(*gpu_);
          const Tensor out = Tensor::empty(Shape{size.m, size.n}, dtype, *gpu_);
          gpu_->synchronize();
          const std::uint64_t allocations = gpu_->memory().stats().num_allocs;
          const ops::MatmulOptions options{.transpose_a = transpose_a, .transpose_b = transpose_b};
          ops::matmul_into(a_gpu, b_gpu, out, options);
          gpu_->synchronize();
          EXPECT_EQ(gpu_->memory().stats().num_allocs, allocations)
              << "matmul " << name_of(dtype) << " " << size.m << "x" << size.n << "x" << size.k
              << (transpose_a ? " aT" : "") << (transpose_b ? " bT" : "") << " allocated on " << gpu_->name();
          const Tensor expected = ops::matmul(ops::cast(a, dtype), ops::cast(b, dtype), options);
          expect_near_values(expected, out, dtype == DType::bf16 ? 1e-2 : 1e-3, "matmul into a preallocated output");
        }
      }
    }
  }
}

// Ten inputs (two kernel passes) where outputs[0] is the last input and outputs[1] the first: every input
// must still be read before any output changes, and every output holds the same left-to-right sum.
TEST_F(OpenClKernelsTest, PeerSumOfMoreInputsThanOnePassReadsEveryInputFirst) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    std::vector<Tensor> cpu_inputs, gpu_inputs;
    for (std::uint64_t index = 0; index < 10; ++index) {
      Tensor value = Tensor::empty(Shape{333}, DType::f32, *cpu_);
      ops::uniform(value, -1.0, 1.0, 100 + index);
      cpu_inputs.push_back(ops::cast(value, dtype));
      gpu_inputs.push_back(cpu_inputs.back().to(*gpu_));
    }
    Tensor extra_cpu = Tensor::empty(Shape{333}, dtype, *cpu_);
    Tensor extra_gpu = Tensor::empty(Shape{333}, dtype, *gpu_);
    const std::vector<Tensor> cpu_outputs = {cpu_inputs[9], cpu_inputs[0], extra_cpu};
    const std::vector<Tensor> gpu_outputs = {gpu_inputs[9], gpu_inputs[0], extra_gpu};
    ops::sum_across_peers(cpu_outputs, cpu_inputs);
    ops::sum_across_peers(gpu_outputs, gpu_inputs);
    for (std::size_t index = 0; index < cpu_outputs.size(); ++index) {
      expect_same_bits(cpu_outputs[index], gpu_outputs[index],
                       "sum_across_peers " + std::string(name_of(dtype)) + " output " + std::to_string(index));
    }
  }
}

// Adam and SGD (momentum, nesterov) on float32 parameters with 16-bit gradients and the device-read flag:
// 0 leaves everything bitwise untouched, 0.5 scales the gradient as the CPU does.
TEST_F(OpenClKernelsTest, OptimizersReadTheApplyFlagOnTheDevice) {
  const Shape shape{257};
  for (const DType grad_dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const float flag : {0.0F, 0.5F}) {
      const std::string what = std::string(name_of(grad_dtype)) + " flag " + std::to_string(flag);
      Tensor param = Tensor::empty(shape, DType::f32, *cpu_);
      Tensor grad32 = Tensor::empty(shape, DType::f32, *cpu_);
      ops::uniform(param, -1.0, 1.0, 1);
      ops::uniform(grad32, -1.0, 1.0, 2);
      const Tensor grad = ops::cast(grad32, grad_dtype);
      const Tensor apply = make(std::vector<float>{flag}, Shape{}, DType::f32, *cpu_);
      Tensor m = ops::scale(param, 0.1);
      Tensor v = ops::scale(ops::mul(param, param), 0.2);
      Tensor param_gpu = param.to(*gpu_), m_gpu = m.to(*gpu_), v_gpu = v.to(*gpu_);
      const Tensor before = param.to(*cpu_);
      ops::adam_update_if(apply, param, grad, m, v, 3, ops::AdamOptions{});
      ops::adam_update_if(apply.to(*gpu_), param_gpu, grad.to(*gpu_), m_gpu, v_gpu, 3, ops::AdamOptions{});
      if (flag == 0.0F) expect_same_bits(before, param_gpu, "adam skipped " + what);
      expect_near_values(param, param_gpu, 1e-6, "adam param " + what);
      expect_near_values(m, m_gpu, 1e-6, "adam m " + what);
      expect_near_values(v, v_gpu, 1e-6, "adam v " + what);

      Tensor velocity = ops::scale(param, 0.01);
      Tensor velocity_gpu = velocity.to(*gpu_);
      param_gpu = param.to(*gpu_);
      const ops::SgdOptions sgd{.learning_rate = 0.1, .momentum = 0.9, .nesterov = true};
      ops::sgd_update_if(apply, param, grad, velocity, sgd);
      ops::sgd_update_if(apply.to(*gpu_), param_gpu, grad.to(*gpu_), velocity_gpu, sgd);
      expect_near_values(param, param_gpu, 1e-6, "sgd param " + what);
      expect_near_values(velocity, velocity_gpu, 1e-6, "sgd velocity " + what);
    }
  }
}

}  // namespace
}  // namespace tp

// SPDX-License-Identifier: Apache-2.0
// The CUDA kernels' host-side parts, checked without a GPU: the launch geometry for element counts past 2^31,
// the mapping of row-major products onto cuBLASLt's column-major call (run on a host model of cuBLASLt's
// semantics), and the Philox bits the device computes against the CPU's. One test needs a GPU (a grid-stride
// launch over more than 2^31 elements) and reports SKIPPED without one.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "backend/cpu/kernels/elementwise.hpp"
#include "backend/cpu/kernels/optimizer.hpp"
#include "backend/cpu/kernels/philox.hpp"
#include "backend/cpu/kernels/random.hpp"
#include "backend/cuda/cuda_matmul_layout.hpp"
#include "backend/cuda/kernels/geometry.cuh"
#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/kernels/philox.cuh"

namespace tp::backend::cuda {
namespace {

using kernels::grid_blocks;
using kernels::kMaxBlocks;
using kernels::kThreads;

// ---- launch geometry ----

TEST(CudaLaunchGeometry, CoversSmallCountsWithWholeBlocks) {
  EXPECT_EQ(grid_blocks(0), 1U);
  EXPECT_EQ(grid_blocks(-5), 1U);
  EXPECT_EQ(grid_blocks(1), 1U);
  EXPECT_EQ(grid_blocks(256), 1U);
  EXPECT_EQ(grid_blocks(257), 2U);
  EXPECT_EQ(grid_blocks(256 * 1000), 1000U);
  EXPECT_EQ(grid_blocks(256 * 1000 + 1), 1001U);
}

// Past 2^31 elements the grid is capped and computed without overflow; the grid-stride loop then reaches every
// element (the threads' first indices cover [0, blocks * kThreads), the stride is that span), and its last
// step past n stays inside int64 for any n up to 2^62 (more than any device's memory holds).
TEST(CudaLaunchGeometry, LargeCountsAreCappedWithoutOverflow) {
  const std::int64_t counts[] = {std::int64_t{1} << 31, (std::int64_t{1} << 31) + 1, std::int64_t{1} << 32,
                                 (std::int64_t{1} << 40) + 17, std::int64_t{1} << 62};
  for (const std::int64_t n : counts) {
    const unsigned blocks = grid_blocks(n);
    EXPECT_EQ(blocks, static_cast<unsigned>(kMaxBlocks)) << n;
    // The loop's last index i < n is followed by i + stride, which must not overflow.
    const auto stride = static_cast<std::int64_t>(blocks) * kThreads;
    EXPECT_GT(stride, 0) << n;
    EXPECT_LE(n - 1, std::numeric_limits<std::int64_t>::max() - stride) << n;
  }
  // Just below the cap the grid covers n in one pass.
  const std::int64_t exact = kMaxBlocks * kThreads;
  EXPECT_EQ(grid_blocks(exact), static_cast<unsigned>(kMaxBlocks));
  EXPECT_EQ(grid_blocks(exact - kThreads), static_cast<unsigned>(kMaxBlocks - 1));
}

// A dtype a kernel does not take is refused before anything is launched (no CUDA call: runs without a GPU).
TEST(CudaLaunchGeometry, UnsupportedDtypesAreRefusedWithoutALaunch) {
  EXPECT_EQ(kernels::launch_binary(kernels::Dtype::i32, 0, 0, nullptr, nullptr, nullptr, 4, 1, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(kernels::launch_relu(kernels::Dtype::u8, nullptr, nullptr, 4, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kernels::launch_adam(kernels::Dtype::f64, kernels::Dtype::f16, nullptr, nullptr, nullptr, nullptr, nullptr,
                                 kernels::AdamHyper{}, 4, nullptr),
            cudaErrorInvalidValue);
  // Nothing to do is a success, whatever the dtype.
  EXPECT_EQ(kernels::launch_binary(kernels::Dtype::i32, 0, 0, nullptr, nullptr, nullptr, 0, 1, nullptr), cudaSuccess);
}

// ---- the cuBLASLt mapping ----

// Element (row, col) of a column-major operand as cuBLASLt reads it for the product: op(X)[row, col].
double read(const std::vector<double>& data, const LtOperand& operand, std::int64_t row, std::int64_t col) {
  const std::int64_t r = operand.transpose ? col : row;
  const std::int64_t c = operand.transpose ? row : col;
  EXPECT_LT(r, operand.rows);
  EXPECT_LT(c, operand.cols);
  return data[static_cast<std::size_t>(c * operand.ld + r)];
}

// C' = op(A') op(B'), column-major, as cuBLASLt computes it with the given layouts.
std::vector<double> lt_model(const LtGemm& gemm, const std::vector<double>& first, const std::vector<double>& second) {
  std::vector<double> c(static_cast<std::size_t>(gemm.c.ld * gemm.c.cols), 0.0);
  for (std::int64_t i = 0; i < gemm.m; ++i) {
    for (std::int64_t j = 0; j < gemm.n; ++j) {
      double sum = 0;
      for (std::int64_t p = 0; p < gemm.k; ++p) sum += read(first, gemm.a, i, p) * read(second, gemm.b, p, j);
      c[static_cast<std::size_t>(j * gemm.c.ld + i)] = sum;
    }
  }
  return c;
}

// The mapping, run through the model on row-major buffers, gives the row-major product for every transpose
// combination and odd shapes; each operand's layout spans exactly its buffer.
TEST(CudaMatmulLayout, RowMajorProductsMapOntoCublasLt) {
  const std::int64_t shapes[][3] = {{2, 3, 4}, {5, 1, 7}, {1, 6, 1}, {3, 3, 3}};
  for (const auto& shape : shapes) {
    const std::int64_t m = shape[0], n = shape[1], k = shape[2];
    for (const bool transpose_a : {false, true}) {
      for (const bool transpose_b : {false, true}) {
        // a as stored: [m, k] or [k, m]; b: [k, n] or [n, k]; values distinct per position.
        std::vector<double> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = 1.0 + static_cast<double>(i);
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.5 - static_cast<double>(i) * 0.25;
        const auto a_at = [&](std::int64_t row, std::int64_t col) {  // op(a)[row, col]
          return transpose_a ? a[static_cast<std::size_t>(col * m + row)] : a[static_cast<std::size_t>(row * k + col)];
        };
        const auto b_at = [&](std::int64_t row, std::int64_t col) {  // op(b)[row, col]
          return transpose_b ? b[static_cast<std::size_t>(col * k + row)] : b[static_cast<std::size_t>(row * n + col)];
        };
        const LtGemm gemm = lt_gemm_of(transpose_a, transpose_b, m, n, k);
        EXPECT_EQ(gemm.a.rows * gemm.a.cols, k * n);
        EXPECT_EQ(gemm.b.rows * gemm.b.cols, m * k);
        const std::vector<double> c = lt_model(gemm, b, a);  // cuBLASLt's A' is our b, B' our a
        ASSERT_EQ(c.size(), static_cast<std::size_t>(m * n));
        for (std::int64_t row = 0; row < m; ++row) {
          for (std::int64_t col = 0; col < n; ++col) {
            double expected = 0;
            for (std::int64_t p = 0; p < k; ++p) expected += a_at(row, p) * b_at(p, col);
            EXPECT_EQ(c[static_cast<std::size_t>(row * n + col)], expected)
                << "m " << m << " n " << n << " k " << k << " transpose_a " << transpose_a << " transpose_b "
                << transpose_b << " at " << row << "," << col;
          }
        }
      }
    }
  }
}

TEST(CudaMatmulLayout, TheMainJobsProducts) {
  // Forward [128, 784] x [784, 512]: cuBLASLt's C' [512, 128] = W^T' [512, 784] x X' [784, 128].
  EXPECT_EQ(lt_gemm_of(false, false, 128, 512, 784),
            (LtGemm{512, 128, 784, {512, 784, 512, false}, {784, 128, 784, false}, {512, 128, 512, false}}));
  // dW = X^T dY: [784, 128]^T... a = X stored [128, 784] transposed, b = dY [128, 512].
  EXPECT_EQ(lt_gemm_of(true, false, 784, 512, 128),
            (LtGemm{512, 784, 128, {512, 128, 512, false}, {784, 128, 784, true}, {512, 784, 512, false}}));
  // dX = dY W^T: b = W stored [784, 512] transposed.
  EXPECT_EQ(lt_gemm_of(false, true, 128, 784, 512),
            (LtGemm{784, 128, 512, {512, 784, 512, true}, {512, 128, 512, false}, {784, 128, 784, false}}));
}

// ---- Philox ----

TEST(CudaPhilox, WordsMatchTheCpuGenerator) {
  const cpu::PhiloxCounter counters[] = {{0, 0, 0, 0},
                                         {0xFFFFFFFFU, 0xFFFFFFFFU, 0xFFFFFFFFU, 0xFFFFFFFFU},
                                         {0x243F6A88U, 0x85A308D3U, 0x13198A2EU, 0x03707344U},
                                         {7, 0, 1, 0}};
  const cpu::PhiloxKey keys[] = {{0, 0}, {0xFFFFFFFFU, 0xFFFFFFFFU}, {0xA4093822U, 0x299F31D0U}, {42, 0}};
  for (const auto& counter : counters) {
    for (const auto& key : keys) {
      const cpu::PhiloxCounter expected = cpu::philox4x32(counter, key);
      const kernels::PhiloxWords got = kernels::philox4x32_10(
          kernels::PhiloxWords{{counter[0], counter[1], counter[2], counter[3]}}, key[0], key[1]);
      for (int w = 0; w < 4; ++w) EXPECT_EQ(got.w[w], expected[static_cast<std::size_t>(w)]) << "word " << w;
    }
  }
  // Random123's known answer for 10 rounds of the zero counter and key.
  const kernels::PhiloxWords zero = kernels::philox4x32_10(kernels::PhiloxWords{{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.w[0], 0x6627E8D5U);
  EXPECT_EQ(zero.w[3], 0x9B00DBD8U);
}

// The unit values the uniform kernels draw are the CPU's uniform on [0, 1), bit for bit (exact in both), at
// an offset and across a seed with both halves set.
TEST(CudaPhilox, UnitValuesMatchTheCpuUniform) {
  const std::uint64_t seed = 0x0123456789ABCDEFULL;
  const std::uint64_t offset = (std::uint64_t{1} << 33) + 3;  // a block counter with a high word
  constexpr std::int64_t kCount = 37;
  std::vector<float> floats(kCount);
  std::vector<double> doubles(kCount);
  cpu::uniform<float>(floats.data(), kCount, 0.0F, 1.0F, seed, offset);
  cpu::uniform<double>(doubles.data(), kCount, 0.0, 1.0, seed, offset);
  for (std::int64_t i = 0; i < kCount; ++i) {
    const std::uint64_t index = offset + static_cast<std::uint64_t>(i);
    EXPECT_EQ(static_cast<float>(kernels::philox_unit_f32(seed, index)), floats[static_cast<std::size_t>(i)]) << i;
    EXPECT_EQ(kernels::philox_unit_f64(seed, index), doubles[static_cast<std::size_t>(i)]) << i;
  }
}

// ---- on a GPU ----

bool has_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// A device copy of host floats, freed at scope exit.
class DeviceFloats {
 public:
  explicit DeviceFloats(const std::vector<float>& values) : size_(values.size()) {
    EXPECT_EQ(cudaMalloc(&data_, bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, values.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats() { (void)cudaFree(data_); }
  [[nodiscard]] void* get() const { return data_; }
  [[nodiscard]] std::vector<float> download() const {
    std::vector<float> values(size_);
    EXPECT_EQ(cudaMemcpy(values.data(), data_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return values;
  }

 private:
  [[nodiscard]] std::size_t bytes() const { return size_ * sizeof(float); }
  void* data_ = nullptr;
  std::size_t size_;
};

std::vector<float> ramp(std::size_t n, float start, float step) {
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i)
    values[i] = start + step * static_cast<float>(i % 97) - 0.001F * static_cast<float>(i);
  return values;
}

// Bitwise equality of float vectors (NaN payloads and signed zeros included).
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& expected, const char* what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  int mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0 && mismatches++ < 4) {
      ADD_FAILURE() << what << " at " << i << ": " << got[i] << " against the CPU's " << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

// Adam on three gradients summed in place, with a full mirror and a parameter-only mirror, equals the CPU's
// adam_update_summed bit for bit (no fused multiply-add anywhere), and plain Adam equals adam_update.
TEST(CudaLaunchOnDevice, AdamMatchesTheCpuBitForBit) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  constexpr std::int64_t kN = 1000;
  const auto n = static_cast<std::size_t>(kN);
  const float lr = 1e-3F, beta1 = 0.9F, beta2 = 0.999F, epsilon = 1e-7F;
  const std::int64_t step = 3;
  const auto t = static_cast<double>(step);
  const auto alpha = static_cast<float>(static_cast<double>(lr) * std::sqrt(1.0 - std::pow(double{beta2}, t)) /
                                        (1.0 - std::pow(double{beta1}, t)));
  const kernels::AdamHyper hyper{alpha, 1.0F - beta1, 1.0F - beta2, epsilon};

  std::vector<float> param = ramp(n, -0.5F, 0.01F), m = ramp(n, 0.01F, -0.0003F), v = ramp(n, 0.002F, 0.00001F);
  for (float& value : v) value = std::fabs(value);
  const std::vector<float> g0 = ramp(n, 0.3F, -0.007F), g1 = ramp(n, -0.2F, 0.011F), g2 = ramp(n, 0.05F, 0.003F);
  DeviceFloats d_param(param), d_m(m), d_v(v), d_g0(g0), d_g1(g1), d_g2(g2);
  const std::vector<float> zeros(n, 0.0F);
  DeviceFloats mirror_param(zeros), mirror_m(zeros), mirror_v(zeros), only_param(zeros);
  kernels::PeerSumInputs grads{};
  grads.inputs[0] = d_g0.get();
  grads.inputs[1] = d_g1.get();
  grads.inputs[2] = d_g2.get();
  kernels::AdamMirrorPointers mirrors{};
  mirrors.param[0] = mirror_param.get();
  mirrors.m[0] = mirror_m.get();
  mirrors.v[0] = mirror_v.get();
  mirrors.param[1] = only_param.get();
  ASSERT_EQ(kernels::launch_adam_summed(kernels::Dtype::f32, d_param.get(), grads, 3, d_m.get(), d_v.get(), mirrors, 2,
                                        hyper, kN, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::array<const float*, 3> host_grads{g0.data(), g1.data(), g2.data()};
  std::vector<float> cpu_mirror_param(n), cpu_mirror_m(n), cpu_mirror_v(n);
  const std::array<cpu::AdamMirror<float>, 1> cpu_mirrors{
      {{cpu_mirror_param.data(), cpu_mirror_m.data(), cpu_mirror_v.data()}}};
  cpu::adam_update_summed<float>(param.data(), host_grads.data(), host_grads.size(), m.data(), v.data(), kN, lr, beta1,
                                 beta2, epsilon, step, std::span<const cpu::AdamMirror<float>>(cpu_mirrors));
  expect_same_bits(d_param.download(), param, "param");
  expect_same_bits(d_m.download(), m, "m");
  expect_same_bits(d_v.download(), v, "v");
  expect_same_bits(mirror_param.download(), param, "mirror param");
  expect_same_bits(mirror_m.download(), m, "mirror m");
  expect_same_bits(mirror_v.download(), v, "mirror v");
  expect_same_bits(only_param.download(), param, "parameter-only mirror");

  // Plain Adam on one gradient, with no apply flag.
  ASSERT_EQ(kernels::launch_adam(kernels::Dtype::f32, kernels::Dtype::f32, nullptr, d_param.get(), d_g1.get(),
                                 d_m.get(), d_v.get(), hyper, kN, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cpu::adam_update<float>(param.data(), g1.data(), m.data(), v.data(), kN, lr, beta1, beta2, epsilon, step);
  expect_same_bits(d_param.download(), param, "adam param");
  expect_same_bits(d_m.download(), m, "adam m");
  expect_same_bits(d_v.download(), v, "adam v");
}

// The peers' sum of three inputs into the first (in place) equals copy + add_scaled(1) twice on the CPU.
TEST(CudaLaunchOnDevice, PeerSumMatchesTheCpuBitForBit) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  constexpr std::int64_t kN = 777;
  const auto n = static_cast<std::size_t>(kN);
  std::vector<float> a = ramp(n, 0.1F, 0.37F);
  const std::vector<float> b = ramp(n, -3.0F, 0.013F), c = ramp(n, 1e-3F, 1e-5F);
  DeviceFloats d_a(a), d_b(b), d_c(c);
  kernels::PeerSumInputs inputs{};
  inputs.inputs[0] = d_a.get();
  inputs.inputs[1] = d_b.get();
  inputs.inputs[2] = d_c.get();
  ASSERT_EQ(kernels::launch_peer_sum(kernels::Dtype::f32, d_a.get(), inputs, 3, kN, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cpu::add_scaled<float>(a.data(), 1.0F, b.data(), kN);
  cpu::add_scaled<float>(a.data(), 1.0F, c.data(), kN);
  expect_same_bits(d_a.download(), a, "peer sum");
}

// A cast kernel over 2^31 + 3 bytes: the grid-stride loop reaches the elements past 2^31 (a 32-bit index would
// wrap and leave them unwritten).
TEST(CudaLaunchOnDevice, ElementsPastTwoToTheThirtyFirstAreReached) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) GTEST_SKIP() << "no CUDA device";
  const std::int64_t n = (std::int64_t{1} << 31) + 3;
  void* source = nullptr;
  void* target = nullptr;
  ASSERT_EQ(cudaMalloc(&source, static_cast<std::size_t>(n)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&target, static_cast<std::size_t>(n)), cudaSuccess);
  ASSERT_EQ(cudaMemset(source, 7, static_cast<std::size_t>(n)), cudaSuccess);
  ASSERT_EQ(cudaMemset(target, 0, static_cast<std::size_t>(n)), cudaSuccess);
  // u8 -> bool: every nonzero byte becomes 1.
  ASSERT_EQ(kernels::launch_cast(kernels::Dtype::u8, kernels::Dtype::boolean, source, target, n, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::uint8_t tail[4] = {0, 0, 0, 0};
  ASSERT_EQ(cudaMemcpy(tail, static_cast<std::uint8_t*>(target) + n - 4, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (const std::uint8_t byte : tail) EXPECT_EQ(byte, 1);
  std::uint8_t head = 0;
  ASSERT_EQ(cudaMemcpy(&head, target, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(head, 1);
  EXPECT_EQ(cudaFree(source), cudaSuccess);
  EXPECT_EQ(cudaFree(target), cudaSuccess);
}

// The fallback product (for what cuBLASLt cannot take) against a host product, every transpose pair.
TEST(CudaLaunchOnDevice, FallbackMatmulMatchesAHostProduct) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::int64_t m = 5, n = 7, k = 9;
  const std::vector<float> a = ramp(static_cast<std::size_t>(m * k), -1.0F, 0.05F);
  const std::vector<float> b = ramp(static_cast<std::size_t>(k * n), 0.5F, -0.03F);
  DeviceFloats d_a(a), d_b(b), d_out(std::vector<float>(static_cast<std::size_t>(m * n), 0.0F));
  for (const bool transpose_a : {false, true}) {
    for (const bool transpose_b : {false, true}) {
      ASSERT_EQ(kernels::launch_matmul_fallback(kernels::Dtype::f32, transpose_a, transpose_b, d_a.get(), d_b.get(),
                                                d_out.get(), m, n, k, nullptr),
                cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> got = d_out.download();
      for (std::int64_t row = 0; row < m; ++row) {
        for (std::int64_t col = 0; col < n; ++col) {
          double expected = 0;
          for (std::int64_t p = 0; p < k; ++p) {
            const float left =
                transpose_a ? a[static_cast<std::size_t>(p * m + row)] : a[static_cast<std::size_t>(row * k + p)];
            const float right =
                transpose_b ? b[static_cast<std::size_t>(col * k + p)] : b[static_cast<std::size_t>(p * n + col)];
            expected += static_cast<double>(left) * static_cast<double>(right);
          }
          EXPECT_NEAR(got[static_cast<std::size_t>(row * n + col)], expected, 1e-4)
              << "transpose_a " << transpose_a << " transpose_b " << transpose_b << " at " << row << "," << col;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tp::backend::cuda

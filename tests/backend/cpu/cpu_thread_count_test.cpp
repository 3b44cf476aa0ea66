// SPDX-License-Identifier: Apache-2.0
// Results do not depend on the intra-op thread count: every kernel that splits its work over the pool
// (GEMM blocks of rows or columns, element-wise chunks, reduction blocks, softmax rows) gives bitwise the
// same output with 2, 3 or 4 threads as with 1. Sizes are chosen so that every kernel really splits.

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <type_traits>
#include <vector>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernel_test_support.hpp"
#include "backend/cpu/kernels/activations.hpp"
#include "backend/cpu/kernels/bf16_gemm.hpp"
#include "backend/cpu/kernels/bias.hpp"
#include "backend/cpu/kernels/cast.hpp"
#include "backend/cpu/kernels/cross_entropy.hpp"
#include "backend/cpu/kernels/elementwise.hpp"
#include "backend/cpu/kernels/gemm.hpp"
#include "backend/cpu/kernels/half_nn.hpp"
#include "backend/cpu/kernels/optimizer.hpp"
#include "backend/cpu/kernels/scaled_optimizer.hpp"
#include "backend/cpu/kernels/softmax.hpp"
#include "tensorpool/core/half.hpp"

namespace tp::backend::cpu {
namespace {

class ThreadCount : public ::testing::Test {
 protected:
  void TearDown() override { set_intra_op_threads(1); }
};

// Runs `compute` (which fills `output` from fresh copies of its inputs) with 1 thread, then with 2, 3 and 4,
// and expects the same bits every time.
template <typename T>
void expect_same_bits(std::size_t size, const std::function<void(std::vector<T>&)>& compute) {
  set_intra_op_threads(1);
  std::vector<T> reference(size);
  compute(reference);
  for (int threads : {2, 3, 4}) {
    set_intra_op_threads(threads);
    std::vector<T> output(size);
    compute(output);
    std::size_t differing = 0;
    for (std::size_t i = 0; i < size; ++i) differing += std::memcmp(&output[i], &reference[i], sizeof(T)) != 0;
    EXPECT_EQ(differing, 0U) << threads << " threads: " << differing << " of " << size << " elements differ";
  }
}

struct GemmShape {
  std::int64_t m, n, k;
};

TEST_F(ThreadCount, MatmulIsBitwiseIndependentOfTheThreadCount) {
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  // The main job's GEMMs at batch 32 and 128 (forward, split over the depth; weight gradient; the layer-2 ones,
  // always split in two blocks), square and ragged shapes, products too small to split, and depth splits with
  // an odd depth, with more columns than rows and with more rows than columns.
  const std::vector<GemmShape> shapes{{32, 512, 784},  {784, 512, 32}, {128, 512, 784}, {784, 512, 128},
                                      {512, 10, 128},  {128, 10, 512}, {128, 512, 10},  {300, 300, 300},
                                      {1001, 37, 513}, {45, 700, 99},  {64, 64, 64},    {32, 10, 512},
                                      {24, 48, 2049},  {20, 700, 999}, {300, 40, 2000}};
  // automatic: each shape's product goes whole to its class's library, whatever the blocks.
  for (const GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn, GemmLibrary::automatic}) {
    for (const GemmShape& shape : shapes) {
      for (Transpose transpose_a : {Transpose::no, Transpose::yes}) {
        for (Transpose transpose_b : {Transpose::no, Transpose::yes}) {
          SCOPED_TRACE(::testing::Message()
                       << name_of(library) << ": m " << shape.m << " n " << shape.n << " k " << shape.k << " ta "
                       << (transpose_a == Transpose::yes) << " tb " << (transpose_b == Transpose::yes));
          const std::vector<float> a = tp_test::random_vector<float>(rng, shape.m * shape.k);
          const std::vector<float> b = tp_test::random_vector<float>(rng, shape.k * shape.n);
          expect_same_bits<float>(static_cast<std::size_t>(shape.m * shape.n), [&](std::vector<float>& c) {
            matmul<float>(transpose_a, transpose_b, shape.m, shape.n, shape.k, 1.0F, a.data(), b.data(), 0.0F, c.data(),
                          library);
          });
        }
      }
    }
  }
}

// The splits of machines with other CPU counts (set_split_ways_for_testing): one CPU (no block), an odd count
// (row or column blocks, no depth split), four and sixteen (each depth half split further into blocks).
TEST_F(ThreadCount, MatmulSplitsOfOtherMachinesAreBitwiseIndependentOfTheThreadCount) {
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  const std::vector<GemmShape> shapes{{128, 512, 784}, {784, 512, 128}, {24, 48, 2049}, {300, 40, 2000}};
  for (const std::int64_t ways : {1, 3, 4, 16}) {
    detail::set_split_ways_for_testing(ways);
    for (const GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
      for (const GemmShape& shape : shapes) {
        SCOPED_TRACE(::testing::Message() << ways << " CPUs, " << name_of(library) << ": m " << shape.m << " n "
                                          << shape.n << " k " << shape.k);
        const std::vector<float> a = tp_test::random_vector<float>(rng, shape.m * shape.k);
        const std::vector<float> b = tp_test::random_vector<float>(rng, shape.k * shape.n);
        expect_same_bits<float>(static_cast<std::size_t>(shape.m * shape.n), [&](std::vector<float>& c) {
          matmul<float>(Transpose::no, Transpose::yes, shape.m, shape.n, shape.k, 1.0F, a.data(), b.data(), 0.0F,
                        c.data(), library);
        });
      }
    }
  }
  detail::set_split_ways_for_testing(0);
}

TEST_F(ThreadCount, OptimizerUpdatesAreBitwiseIndependentOfTheThreadCount) {
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  constexpr std::int64_t kN = 100003;  // 7 chunks, the last one short
  const std::vector<float> param = tp_test::random_vector<float>(rng, kN);
  const std::vector<float> grad = tp_test::random_vector<float>(rng, kN);
  const std::vector<float> moment = tp_test::random_vector<float>(rng, kN, 0.0, 0.1);
  // Output: the updated parameters followed by both moments (Adam) or the velocity (SGD).
  expect_same_bits<float>(3 * kN, [&](std::vector<float>& out) {
    std::vector<float> p = param, m = moment, v = moment;
    adam_update<float>(p.data(), grad.data(), m.data(), v.data(), kN, 1e-3F, 0.9F, 0.999F, 1e-7F, 7);
    std::copy(p.begin(), p.end(), out.begin());
    std::copy(m.begin(), m.end(), out.begin() + kN);
    std::copy(v.begin(), v.end(), out.begin() + 2 * kN);
  });
  expect_same_bits<float>(2 * kN, [&](std::vector<float>& out) {
    std::vector<float> p = param, velocity = moment;
    sgd_update<float>(p.data(), grad.data(), velocity.data(), kN, 1e-2F, 0.9F, true);
    std::copy(p.begin(), p.end(), out.begin());
    std::copy(velocity.begin(), velocity.end(), out.begin() + kN);
  });
}

TEST_F(ThreadCount, ElementWiseKernelsAreBitwiseIndependentOfTheThreadCount) {
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  constexpr std::int64_t kRows = 301;
  constexpr std::int64_t kCols = 512;
  constexpr std::int64_t kN = kRows * kCols;  // 5 chunks of kStreamingGrain
  const std::vector<float> x = tp_test::random_vector<float>(rng, kN);
  const std::vector<float> y = tp_test::random_vector<float>(rng, kN);
  const std::vector<float> row = tp_test::random_vector<float>(rng, kCols);
  expect_same_bits<float>(kN, [&](std::vector<float>& out) { relu<float>(x.data(), out.data(), kN); });
  expect_same_bits<float>(kN, [&](std::vector<float>& out) { relu_grad<float>(y.data(), x.data(), out.data(), kN); });
  expect_same_bits<float>(
      kN, [&](std::vector<float>& out) { binary<float>(BinaryOp::div, x.data(), y.data(), out.data(), kN); });
  expect_same_bits<float>(
      kN, [&](std::vector<float>& out) { binary_scalar<float>(BinaryOp::sub, x.data(), 0.25F, out.data(), kN); });
  expect_same_bits<float>(kN, [&](std::vector<float>& out) {
    out = y;
    add_scaled<float>(out.data(), 0.3F, x.data(), kN);
  });
  expect_same_bits<float>(
      kN, [&](std::vector<float>& out) { bias_add<float>(x.data(), row.data(), out.data(), kRows, kCols); });
  expect_same_bits<float>(kCols,
                          [&](std::vector<float>& out) { bias_add_grad<float>(x.data(), out.data(), kRows, kCols); });
}

template <typename H>
std::vector<H> random_16bit(std::mt19937& rng, std::int64_t n) {
  std::vector<H> values;
  for (const float value : tp_test::random_vector<float>(rng, n)) values.push_back(H::from_float(value));
  return values;
}

// The bfloat16 GEMM on oneDNN is split into blocks over the threads as the float32 one is; this holds only if
// oneDNN sums each element in the same order whatever the block (a 2-block product must equal the whole one).
TEST_F(ThreadCount, Bfloat16MatmulOnOneDnnIsBitwiseIndependentOfTheThreadCount) {
  if (!bf16_gemm_native()) GTEST_SKIP() << "this CPU has no AVX512_BF16: bfloat16 matmul converts around sgemm";
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  // The main job's shapes at batch 32 and 128, a replica's at batch 32 of the mirrored job (depth 16: padded
  // on AMX), ragged and square ones.
  const std::vector<GemmShape> shapes{{32, 512, 784}, {784, 512, 32},  {128, 512, 784}, {784, 512, 128},
                                      {512, 10, 128}, {128, 10, 512},  {128, 512, 10},  {784, 512, 16},
                                      {512, 10, 16},  {1001, 37, 513}, {45, 700, 99},   {300, 300, 300}};
  for (const GemmShape& shape : shapes) {
    for (Transpose transpose_a : {Transpose::no, Transpose::yes}) {
      for (Transpose transpose_b : {Transpose::no, Transpose::yes}) {
        SCOPED_TRACE(::testing::Message()
                     << "m " << shape.m << " n " << shape.n << " k " << shape.k << " ta "
                     << (transpose_a == Transpose::yes) << " tb " << (transpose_b == Transpose::yes));
        const std::vector<BFloat16> a = random_16bit<BFloat16>(rng, shape.m * shape.k);
        const std::vector<BFloat16> b = random_16bit<BFloat16>(rng, shape.k * shape.n);
        expect_same_bits<BFloat16>(static_cast<std::size_t>(shape.m * shape.n), [&](std::vector<BFloat16>& c) {
          matmul_bf16_onednn(transpose_a, transpose_b, shape.m, shape.n, shape.k, a.data(), b.data(), c.data());
        });
        // Padded to a whole AMX tile's depth (a no-op on a CPU without AMX, or for a deep product).
        const std::int64_t depth = bf16_gemm_tile_depth(shape.k);
        expect_same_bits<BFloat16>(static_cast<std::size_t>(shape.m * shape.n), [&](std::vector<BFloat16>& c) {
          matmul_bf16_onednn_at_depth(transpose_a, transpose_b, shape.m, shape.n, shape.k, depth, a.data(), b.data(),
                                      c.data());
        });
      }
    }
  }
}

// Mixed precision's element-wise kernels, the casts of the weights and the update on a 16-bit gradient.
template <typename H>
void expect_half_kernels_independent_of_thread_count() {
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  constexpr std::int64_t kRows = 301;
  constexpr std::int64_t kCols = 512;
  constexpr std::int64_t kN = kRows * kCols;  // 5 chunks of kStreamingGrain
  const std::vector<H> x = random_16bit<H>(rng, kN);
  const std::vector<H> y = random_16bit<H>(rng, kN);
  const std::vector<H> row = random_16bit<H>(rng, kCols);
  const std::vector<float> wide = tp_test::random_vector<float>(rng, kN);
  const DType dtype = std::is_same_v<H, Half> ? DType::f16 : DType::bf16;
  expect_same_bits<H>(kN, [&](std::vector<H>& out) { relu_half<H>(x.data(), out.data(), kN); });
  expect_same_bits<H>(kN, [&](std::vector<H>& out) { relu_grad_half<H>(y.data(), x.data(), out.data(), kN); });
  expect_same_bits<H>(kN,
                      [&](std::vector<H>& out) { bias_add_half<H>(x.data(), row.data(), out.data(), kRows, kCols); });
  expect_same_bits<H>(kCols, [&](std::vector<H>& out) { bias_add_grad_half<H>(x.data(), out.data(), kRows, kCols); });
  expect_same_bits<H>(kN, [&](std::vector<H>& out) { cast(wide.data(), DType::f32, out.data(), dtype, kN); });
  expect_same_bits<float>(kN, [&](std::vector<float>& out) { cast(x.data(), dtype, out.data(), DType::f32, kN); });
  // Output: the updated parameters followed by both moments.
  expect_same_bits<float>(3 * kN, [&](std::vector<float>& out) {
    std::vector<float> p = wide, m(kN, 0.01F), v(kN, 0.02F);
    adam_update_scaled<float, H>(p.data(), x.data(), 0.5F, m.data(), v.data(), kN, 1e-3F, 0.9F, 0.999F, 1e-7F, 3);
    std::copy(p.begin(), p.end(), out.begin());
    std::copy(m.begin(), m.end(), out.begin() + kN);
    std::copy(v.begin(), v.end(), out.begin() + 2 * kN);
  });
  // The folded mirrored update on three replicas' 16-bit gradients: the parameters, both moments and a mirror.
  expect_same_bits<float>(4 * kN, [&](std::vector<float>& out) {
    std::vector<float> p = wide, m(kN, 0.01F), v(kN, 0.02F), mirror(kN, 0.0F);
    const std::array<const H*, 3> grads{x.data(), y.data(), x.data()};
    const std::array<AdamMirror<float>, 1> mirrors{{{.param = mirror.data(), .m = nullptr, .v = nullptr}}};
    adam_update_summed_half<H>(p.data(), grads.data(), grads.size(), m.data(), v.data(), kN, 1e-3F, 0.9F, 0.999F, 1e-7F,
                               3, mirrors);
    std::int64_t offset = 0;
    for (const std::vector<float>* part : {&p, &m, &v, &mirror}) {
      std::copy(part->begin(), part->end(), out.begin() + offset);
      offset += kN;
    }
  });
}

TEST_F(ThreadCount, HalfKernelsCastsAndScaledUpdatesAreBitwiseIndependentOfTheThreadCount) {
  expect_half_kernels_independent_of_thread_count<BFloat16>();
  expect_half_kernels_independent_of_thread_count<Half>();
}

TEST_F(ThreadCount, SoftmaxAndCrossEntropyAreBitwiseIndependentOfTheThreadCount) {
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  constexpr std::int64_t kRows = 1000;
  constexpr std::int64_t kClasses = 10;
  const std::vector<float> logits = tp_test::random_vector<float>(rng, kRows * kClasses, -8.0, 8.0);
  std::vector<std::int32_t> labels(kRows);
  for (std::int32_t& label : labels) label = static_cast<std::int32_t>(rng() % kClasses);
  expect_same_bits<float>(kRows * kClasses,
                          [&](std::vector<float>& out) { softmax<float>(logits.data(), out.data(), kRows, kClasses); });
  // Output: the per-row losses followed by the gradient.
  expect_same_bits<float>(kRows * (kClasses + 1), [&](std::vector<float>& out) {
    sparse_softmax_cross_entropy<float, std::int32_t>(logits.data(), labels.data(), out.data(), out.data() + kRows,
                                                      kRows, kClasses);
  });
}

}  // namespace
}  // namespace tp::backend::cpu

// SPDX-License-Identifier: Apache-2.0
// matmul against a float64 triple loop, for every transpose combination and shapes with 1, odd and empty
// extents. Tolerance: an element of C is a k-term dot product, whose rounding error grows like sqrt(k) in
// practice (k in the worst case); we allow (abs + rel * magnitude) * sqrt(max(k, 1)), where magnitude is
// |alpha| * sum |a||b| + |beta * c| (the sum of the magnitudes of the terms), with float rel 1e-5 /
// abs 1e-6 and double rel 1e-13 / abs 1e-14. A wrong transpose or leading dimension is off by O(1).
// GemmLibrary::automatic: a class's first product measures once, later ones reuse the choice, measuring
// never clobbers the caller's C, and threads meeting a new class at once share one measurement (the
// per-machine cache file: cpu_gemm_auto_cache_test).

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"
#include "backend/cpu/kernels/gemm.hpp"
#include "backend/cpu/kernels/gemm_auto.hpp"
#include "tensorpool/device/gemm_choice.hpp"

namespace {

using tp::backend::cpu::GemmLibrary;
using tp::backend::cpu::matmul;
using tp::backend::cpu::Transpose;
using tp_test::expect_invalid;

// The process keeps its GEMM auto choices in a cache directory of its own, removed at the end: a test that
// expects a class's first product to measure must not find the class in the file an earlier run saved.
class OwnGemmCacheDirectory : public ::testing::Environment {
 public:
  void SetUp() override {
    directory_ = std::filesystem::temp_directory_path() / ("tp_cpu_gemm_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(directory_);
    ::setenv("TP_CACHE_DIR", directory_.c_str(), /*overwrite=*/1);
    tp::backend::cpu::reset_gemm_auto_choices();
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

 private:
  std::filesystem::path directory_;
};
[[maybe_unused]] ::testing::Environment* const kOwnGemmCacheDirectory =
    ::testing::AddGlobalTestEnvironment(new OwnGemmCacheDirectory);  // gtest owns it

template <typename T>
struct Tolerance;
template <>
struct Tolerance<float> {
  static constexpr double rel = 1e-5;
  static constexpr double abs = 1e-6;
};
template <>
struct Tolerance<double> {
  static constexpr double rel = 1e-13;
  static constexpr double abs = 1e-14;
};

struct Case {
  std::int64_t m;
  std::int64_t n;
  std::int64_t k;
};

// Element (row, col) of a stored matrix with `cols` columns.
template <typename T>
double at(const std::vector<T>& matrix, std::int64_t cols, std::int64_t row, std::int64_t col) {
  return static_cast<double>(matrix[static_cast<std::size_t>(row * cols + col)]);
}

template <typename T>
void check_case(std::mt19937& rng, Case shape, Transpose ta, Transpose tb, T alpha, T beta, GemmLibrary library) {
  const auto [m, n, k] = shape;
  SCOPED_TRACE(::testing::Message() << "m=" << m << " n=" << n << " k=" << k << " ta=" << (ta == Transpose::yes)
                                    << " tb=" << (tb == Transpose::yes) << " alpha=" << alpha << " beta=" << beta);
  const std::vector<T> a = tp_test::random_vector<T>(rng, m * k);
  const std::vector<T> b = tp_test::random_vector<T>(rng, k * n);
  std::vector<T> c = tp_test::random_vector<T>(rng, m * n);
  const std::int64_t a_cols = ta == Transpose::yes ? m : k;  // A stored k x m when transposed
  const std::int64_t b_cols = tb == Transpose::yes ? k : n;
  std::vector<double> expected(c.size());
  std::vector<double> magnitude(c.size());
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0;
      double sum_abs = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double left = ta == Transpose::yes ? at(a, a_cols, p, i) : at(a, a_cols, i, p);
        const double right = tb == Transpose::yes ? at(b, b_cols, j, p) : at(b, b_cols, p, j);
        sum += left * right;
        sum_abs += std::fabs(left * right);
      }
      const auto index = static_cast<std::size_t>(i * n + j);
      const double old = beta == T{0} ? 0.0 : static_cast<double>(beta) * static_cast<double>(c[index]);
      expected[index] = static_cast<double>(alpha) * sum + old;
      magnitude[index] = std::fabs(static_cast<double>(alpha)) * sum_abs + std::fabs(old);
    }
  }
  matmul(ta, tb, m, n, k, alpha, a.data(), b.data(), beta, c.data(), library);
  const double growth = std::sqrt(static_cast<double>(std::max<std::int64_t>(k, 1)));
  for (std::size_t index = 0; index < c.size(); ++index) {
    const double tolerance = (Tolerance<T>::abs + Tolerance<T>::rel * magnitude[index]) * growth;
    ASSERT_NEAR(static_cast<double>(c[index]), expected[index], tolerance) << "element " << index;
  }
}

template <typename T>
class MatmulTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MatmulTest, FloatTypes);

template <typename T>
void matches_float64_reference_for_all_transposes(GemmLibrary library = GemmLibrary::openblas) {
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  const std::vector<Case> cases = {{1, 1, 1}, {7, 13, 5},   {13, 5, 7},   {1, 9, 1},  {9, 1, 3},
                                   {3, 4, 1}, {16, 17, 31}, {64, 33, 65}, {2, 3, 200}};
  for (const Case& shape : cases) {
    for (Transpose ta : {Transpose::no, Transpose::yes}) {
      for (Transpose tb : {Transpose::no, Transpose::yes}) {
        check_case<T>(rng, shape, ta, tb, T{1}, T{0}, library);
        check_case<T>(rng, shape, ta, tb, T{0.5}, T{-1.25}, library);
      }
    }
  }
}

template <typename T>
void empty_output_touches_nothing_and_empty_k_scales_c(GemmLibrary library = GemmLibrary::openblas) {
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  for (const Case& shape : {Case{0, 3, 4}, Case{3, 0, 4}, Case{0, 0, 0}, Case{3, 4, 0}, Case{1, 1, 0}}) {
    for (Transpose ta : {Transpose::no, Transpose::yes}) {
      for (Transpose tb : {Transpose::no, Transpose::yes}) {
        check_case<T>(rng, shape, ta, tb, T{2}, T{-0.5}, library);
        check_case<T>(rng, shape, ta, tb, T{1}, T{0}, library);
      }
    }
  }
  // Null pointers are fine where a matrix has no elements.
  std::vector<T> c{T{1}, T{2}};
  matmul<T>(Transpose::no, Transpose::no, 2, 1, 0, T{1}, nullptr, nullptr, T{3}, c.data(), library);
  EXPECT_EQ(c, (std::vector<T>{T{3}, T{6}}));
  const std::vector<T> b(35, T{1});  // 7 x 5: a real matrix even though m == 0 leaves nothing to read
  matmul<T>(Transpose::no, Transpose::no, 0, 5, 7, T{1}, nullptr, b.data(), T{3}, nullptr, library);
}

template <typename T>
void beta_zero_overwrites_nan_in_c(GemmLibrary library = GemmLibrary::openblas) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const std::vector<T> a{T{1}, T{2}, T{3}, T{4}};  // [[1, 2], [3, 4]]
  const std::vector<T> b{T{5}, T{6}, T{7}, T{8}};  // [[5, 6], [7, 8]]
  std::vector<T> c(4, nan);
  matmul(Transpose::no, Transpose::no, 2, 2, 2, T{1}, a.data(), b.data(), T{0}, c.data(), library);
  EXPECT_EQ(c, (std::vector<T>{T{19}, T{22}, T{43}, T{50}}));
  std::vector<T> c_t(4, nan);  // A^T B^T = (BA)^T: [[23, 31], [34, 46]]
  matmul(Transpose::yes, Transpose::yes, 2, 2, 2, T{1}, a.data(), b.data(), T{0}, c_t.data(), library);
  EXPECT_EQ(c_t, (std::vector<T>{T{23}, T{31}, T{34}, T{46}}));
  std::vector<T> c_empty_k(4, nan);
  matmul<T>(Transpose::no, Transpose::no, 2, 2, 0, T{1}, nullptr, nullptr, T{0}, c_empty_k.data(), library);
  EXPECT_EQ(c_empty_k, std::vector<T>(4, T{0}));
}

TYPED_TEST(MatmulTest, MatchesFloat64ReferenceForAllTransposes) {
  matches_float64_reference_for_all_transposes<TypeParam>();
}
TYPED_TEST(MatmulTest, EmptyOutputTouchesNothingAndEmptyKScalesC) {
  empty_output_touches_nothing_and_empty_k_scales_c<TypeParam>();
}
TYPED_TEST(MatmulTest, BetaZeroOverwritesNaNInC) { beta_zero_overwrites_nan_in_c<TypeParam>(); }

// Products computed over the two halves of their depth (split-K, gemm.cpp) on a machine with an even CPU
// count: every transpose, alpha and beta (beta = 0 overwriting NaN included), an odd depth, more columns than
// rows and more rows than columns; and the shapes that do not split.
TYPED_TEST(MatmulTest, DepthSplitProductsMatchTheFloat64Reference) {
  using tp::backend::cpu::detail::splits_depth;
  const std::uint32_t seed = tp_test::test_seed();
  TP_TRACE_SEED(seed);
  std::mt19937 rng(seed);
  // The CPU count the blocks follow (gemm.cpp's split_ways: the online CPUs, at least one).
  const bool even = std::max(1U, std::thread::hardware_concurrency()) % 2 == 0;
  for (const Case& shape : {Case{16, 40, 4096}, Case{24, 48, 2049}, Case{5, 700, 999}, Case{300, 8, 2000}}) {
    EXPECT_EQ(splits_depth(shape.m, shape.n, shape.k), even) << shape.m << " x " << shape.n << " x " << shape.k;
    for (const GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
      for (Transpose ta : {Transpose::no, Transpose::yes}) {
        for (Transpose tb : {Transpose::no, Transpose::yes}) {
          check_case<TypeParam>(rng, shape, ta, tb, TypeParam{1}, TypeParam{0}, library);
          check_case<TypeParam>(rng, shape, ta, tb, TypeParam{0.5}, TypeParam{-1.25}, library);
        }
      }
    }
    const std::vector<TypeParam> a(static_cast<std::size_t>(shape.m * shape.k), TypeParam{1});
    const std::vector<TypeParam> b(static_cast<std::size_t>(shape.k * shape.n), TypeParam{2});
    std::vector<TypeParam> c(static_cast<std::size_t>(shape.m * shape.n), std::numeric_limits<TypeParam>::quiet_NaN());
    matmul<TypeParam>(Transpose::no, Transpose::no, shape.m, shape.n, shape.k, TypeParam{1}, a.data(), b.data(),
                      TypeParam{0}, c.data());
    EXPECT_EQ(c, std::vector<TypeParam>(c.size(), static_cast<TypeParam>(2 * shape.k))) << "beta = 0 overwrites C";
  }
  // As machines of 4 and 16 CPUs split them (each depth half into 2 or 8 blocks), and of 3 (no depth split).
  for (const std::int64_t ways : {3, 4, 16}) {
    tp::backend::cpu::detail::set_split_ways_for_testing(ways);
    EXPECT_EQ(splits_depth(300, 8, 2000), ways % 2 == 0) << ways << " CPUs";
    for (const Case& shape : {Case{16, 40, 4096}, Case{5, 700, 999}, Case{300, 8, 2000}}) {
      check_case<TypeParam>(rng, shape, Transpose::no, Transpose::yes, TypeParam{0.5}, TypeParam{-1.25},
                            GemmLibrary::onednn);
      check_case<TypeParam>(rng, shape, Transpose::yes, Transpose::no, TypeParam{1}, TypeParam{0},
                            GemmLibrary::openblas);
    }
  }
  tp::backend::cpu::detail::set_split_ways_for_testing(0);
  // Depth below twice the rows (the weight gradient, a square product) or too little work: row or column blocks.
  EXPECT_FALSE(splits_depth(784, 512, 128));
  EXPECT_FALSE(splits_depth(300, 300, 300));
  EXPECT_FALSE(splits_depth(128, 10, 512));
  EXPECT_FALSE(splits_depth(2, 3, 200));
  EXPECT_EQ(splits_depth(128, 512, 784), even) << "the main job's forward product at batch 128";
}

// The same checks with oneDNN computing the float32 products (float64 stays on OpenBLAS).
TEST(OneDnnMatmul, MatchesFloat64ReferenceForAllTransposes) {
  matches_float64_reference_for_all_transposes<float>(GemmLibrary::onednn);
}
TEST(OneDnnMatmul, EmptyOutputTouchesNothingAndEmptyKScalesC) {
  empty_output_touches_nothing_and_empty_k_scales_c<float>(GemmLibrary::onednn);
}
TEST(OneDnnMatmul, BetaZeroOverwritesNaNInC) { beta_zero_overwrites_nan_in_c<float>(GemmLibrary::onednn); }

// The library argument takes effect: on the main job's forward GEMM the two libraries sum in different orders, so some
// elements differ in their last bits (and all agree within rounding).
TEST(OneDnnMatmul, ComputesWithOtherKernelsThanOpenBlas) {
  std::mt19937 rng(tp_test::test_seed());
  const std::int64_t m = 128, n = 512, k = 784;
  const std::vector<float> a = tp_test::random_vector<float>(rng, m * k);
  const std::vector<float> b = tp_test::random_vector<float>(rng, k * n);
  std::vector<float> onednn(static_cast<std::size_t>(m * n)), openblas(onednn.size());
  matmul<float>(Transpose::no, Transpose::no, m, n, k, 1.0F, a.data(), b.data(), 0.0F, onednn.data(),
                GemmLibrary::onednn);
  matmul<float>(Transpose::no, Transpose::no, m, n, k, 1.0F, a.data(), b.data(), 0.0F, openblas.data(),
                GemmLibrary::openblas);
  std::size_t differing = 0;
  for (std::size_t i = 0; i < onednn.size(); ++i) {
    differing += onednn[i] != openblas[i];
    ASSERT_NEAR(onednn[i], openblas[i], 1e-4 * (1.0 + std::fabs(openblas[i]))) << "element " << i;
  }
  EXPECT_GT(differing, 0U) << "oneDNN gave OpenBLAS's bits everywhere: was it called at all?";
}

TEST(GemmLibrary, NamesParseAndAnUnknownOneIsRefused) {
  using tp::backend::cpu::parse_gemm_library;
  EXPECT_EQ(parse_gemm_library("auto", "--gemm"), GemmLibrary::automatic);
  EXPECT_EQ(parse_gemm_library("openblas", "--gemm"), GemmLibrary::openblas);
  EXPECT_EQ(parse_gemm_library("onednn", "--gemm"), GemmLibrary::onednn);
  EXPECT_EQ(tp::backend::cpu::name_of(GemmLibrary::onednn), "onednn");
  EXPECT_EQ(tp::backend::cpu::name_of(GemmLibrary::automatic), "auto");
  expect_invalid([] { parse_gemm_library("mkl", "--gemm"); }, {"--gemm", "'mkl'", "auto", "openblas", "onednn"});
  expect_invalid([] { parse_gemm_library("automatic", "--gemm"); }, {"--gemm", "'automatic'", "auto"});
}

// The names `--gemm` and TP_GEMM accept (tp::device::kGemmLibraryNames) are exactly the backend's libraries.
TEST(GemmLibrary, TheDeviceLayersNamesAreTheBackendsLibraries) {
  std::vector<std::string_view> backend;
  for (const GemmLibrary library : {GemmLibrary::automatic, GemmLibrary::openblas, GemmLibrary::onednn}) {
    backend.push_back(tp::backend::cpu::name_of(library));
  }
  const std::vector<std::string_view> device(tp::device::kGemmLibraryNames.begin(),
                                             tp::device::kGemmLibraryNames.end());
  EXPECT_EQ(device, backend);
  for (const std::string_view name : tp::device::kGemmLibraryNames) {
    EXPECT_EQ(tp::backend::cpu::name_of(tp::backend::cpu::parse_gemm_library(name, "--gemm")), name);
  }
}

// The same checks with the library chosen per shape class by measurement: the first product of each class
// measures both libraries and still leaves C = alpha * op(A) op(B) + beta * C (beta != 0 included).
TEST(AutoMatmul, MatchesFloat64ReferenceForAllTransposes) {
  matches_float64_reference_for_all_transposes<float>(GemmLibrary::automatic);
}
TEST(AutoMatmul, EmptyOutputTouchesNothingAndEmptyKScalesC) {
  empty_output_touches_nothing_and_empty_k_scales_c<float>(GemmLibrary::automatic);
}
TEST(AutoMatmul, BetaZeroOverwritesNaNInC) { beta_zero_overwrites_nan_in_c<float>(GemmLibrary::automatic); }

// The choice for `shape`'s class made so far in the process; fails the test when there is none.
tp::backend::cpu::GemmAutoChoice choice_for(std::int64_t m, std::int64_t n, std::int64_t k) {
  for (const auto& choice : tp::backend::cpu::gemm_auto_choices()) {
    if (choice.shape.m == m && choice.shape.n == n && choice.shape.k == k) return choice;
  }
  ADD_FAILURE() << "no choice recorded for " << m << " x " << n << " x " << k;
  return {};
}

// Each test below uses shape classes (sizes rounded up to powers of two) that no other test of this file
// meets, so that the first product of the class is the test's own.
TEST(AutoMatmul, TheFirstProductOfAClassMeasuresOnceAndLaterOnesUseTheChoice) {
  using tp::backend::cpu::gemm_auto_measurements;
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  const std::int64_t m = 1500, n = 70, k = 900;  // class 2048 x 128 x 1024
  const std::vector<float> a = tp_test::random_vector<float>(rng, m * k);
  const std::vector<float> b = tp_test::random_vector<float>(rng, k * n);
  std::vector<float> c(static_cast<std::size_t>(m * n));
  const std::int64_t before = gemm_auto_measurements();
  matmul<float>(Transpose::no, Transpose::no, m, n, k, 1.0F, a.data(), b.data(), 0.0F, c.data(),
                GemmLibrary::automatic);
  EXPECT_EQ(gemm_auto_measurements(), before + 1);
  const tp::backend::cpu::GemmAutoChoice choice = choice_for(m, n, k);
  EXPECT_TRUE(choice.library == GemmLibrary::openblas || choice.library == GemmLibrary::onednn);
  EXPECT_GT(choice.openblas_gflops, 0.0);
  EXPECT_GT(choice.onednn_gflops, 0.0);
  // The product is the chosen library's, bit for bit.
  std::vector<float> chosen(c.size());
  matmul<float>(Transpose::no, Transpose::no, m, n, k, 1.0F, a.data(), b.data(), 0.0F, chosen.data(), choice.library);
  EXPECT_EQ(c, chosen);
  // Again, and a smaller product of the same class: the cached choice, no measurement.
  std::vector<float> again(c.size());
  matmul<float>(Transpose::no, Transpose::no, m, n, k, 1.0F, a.data(), b.data(), 0.0F, again.data(),
                GemmLibrary::automatic);
  EXPECT_EQ(again, chosen);
  matmul<float>(Transpose::no, Transpose::no, 1100, 65, 600, 1.0F, a.data(), b.data(), 0.0F, again.data(),
                GemmLibrary::automatic);
  EXPECT_EQ(gemm_auto_measurements(), before + 1);
  // The transposes make other classes.
  matmul<float>(Transpose::yes, Transpose::no, m, n, k, 1.0F, a.data(), b.data(), 0.0F, again.data(),
                GemmLibrary::automatic);
  EXPECT_EQ(gemm_auto_measurements(), before + 2);
}

// Measuring writes only scratch memory: with beta != 0 the measured product reads the caller's C as it was.
TEST(AutoMatmul, MeasuringLeavesTheCallersCForTheProductToScale) {
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  const std::int64_t m = 40, n = 3000, k = 20;  // class 64 x 4096 x 32
  const std::vector<float> a = tp_test::random_vector<float>(rng, m * k);
  const std::vector<float> b = tp_test::random_vector<float>(rng, k * n);
  const std::vector<float> c_before = tp_test::random_vector<float>(rng, m * n);
  std::vector<float> c = c_before;
  const std::int64_t before = tp::backend::cpu::gemm_auto_measurements();
  matmul<float>(Transpose::no, Transpose::yes, m, n, k, 2.0F, a.data(), b.data(), 0.5F, c.data(),
                GemmLibrary::automatic);
  ASSERT_EQ(tp::backend::cpu::gemm_auto_measurements(), before + 1) << "the product did not measure";
  std::vector<float> expected = c_before;
  matmul<float>(Transpose::no, Transpose::yes, m, n, k, 2.0F, a.data(), b.data(), 0.5F, expected.data(),
                choice_for(m, n, k).library);
  EXPECT_EQ(c, expected);
}

// Threads meeting a new class at once: one measures, the others wait for its choice; all compute with it.
TEST(AutoMatmul, ThreadsMeetingANewClassAtOnceMeasureItOnce) {
  std::mt19937 rng(tp_test::test_seed());
  TP_TRACE_SEED(tp_test::test_seed());
  const std::int64_t m = 96, n = 200, k = 300;  // class 128 x 256 x 512
  const std::vector<float> a = tp_test::random_vector<float>(rng, m * k);
  const std::vector<float> b = tp_test::random_vector<float>(rng, k * n);
  constexpr int kThreads = 4;
  std::vector<std::vector<float>> results(kThreads, std::vector<float>(static_cast<std::size_t>(m * n)));
  const std::int64_t before = tp::backend::cpu::gemm_auto_measurements();
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        matmul<float>(Transpose::yes, Transpose::yes, m, n, k, 1.0F, a.data(), b.data(), 0.0F,
                      results[static_cast<std::size_t>(t)].data(), GemmLibrary::automatic);
      });
    }
  }
  EXPECT_EQ(tp::backend::cpu::gemm_auto_measurements(), before + 1);
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(results[static_cast<std::size_t>(t)], results[0]) << "thread " << t;
}

TEST(Matmul, RejectsNegativeSizesNullPointersAndBlasOverflow) {
  std::vector<float> buffer(16, 1.0F);
  float* data = buffer.data();
  expect_invalid([&] { matmul(Transpose::no, Transpose::no, -1, 2, 2, 1.0F, data, data, 0.0F, data); },
                 {"[cpu]", "matmul", "m = -1"});
  expect_invalid([&] { matmul(Transpose::no, Transpose::no, 2, 2, -3, 1.0F, data, data, 0.0F, data); }, {"k = -3"});
  expect_invalid([&] { matmul<float>(Transpose::no, Transpose::no, 2, 2, 2, 1.0F, nullptr, data, 0.0F, data); },
                 {"a is null", "4 elements"});
  expect_invalid([&] { matmul<float>(Transpose::no, Transpose::no, 2, 3, 2, 1.0F, data, data, 0.0F, nullptr); },
                 {"c is null", "6 elements"});
  const std::int64_t huge = std::int64_t{1} << 31;
  expect_invalid([&] { matmul<double>(Transpose::no, Transpose::no, huge, 1, 1, 1.0, nullptr, nullptr, 0.0, nullptr); },
                 {"m = 2147483648", "BLAS limit"});
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/shape.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tensorpool/core/error.hpp"

namespace {

using tp::DType;
using tp::Shape;

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// Runs `action`, expects tp::InvalidArgument, and checks every fragment appears in its message.
template <typename Action>
void expect_invalid(Action action, const std::vector<std::string>& fragments) {
  try {
    action();
    ADD_FAILURE() << "no tp::InvalidArgument thrown";
  } catch (const tp::InvalidArgument& error) {
    const std::string text = error.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(text.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << text;
    }
  }
}

TEST(Shape, BasicsFromInitializerListAndVector) {
  const Shape shape{784, 512};
  EXPECT_EQ(shape.rank(), 2u);
  EXPECT_EQ(shape.dim(0), 784);
  EXPECT_EQ(shape.dim(1), 512);
  EXPECT_EQ(shape.num_elements(), 784 * 512);
  EXPECT_EQ(shape.to_string(), "[784,512]");
  EXPECT_EQ(shape, Shape(std::vector<std::int64_t>{784, 512}));
  EXPECT_NE(shape, (Shape{512, 784}));
  EXPECT_NE(shape, (Shape{784, 512, 1}));
  EXPECT_EQ(shape.dims_vector(), (std::vector<std::int64_t>{784, 512}));
  std::ostringstream stream;
  stream << shape;
  EXPECT_EQ(stream.str(), "[784,512]");
}

// Ranks up to kInlineRank live in the Shape, larger ones on the heap: copies and moves of both keep the dims,
// a moved-from Shape is a scalar, and equality compares dims, not where they are kept.
TEST(Shape, InlineAndHeapRanksCopyMoveAndCompare) {
  for (std::size_t rank :
       {std::size_t{0}, std::size_t{1}, Shape::kInlineRank, Shape::kInlineRank + 1, std::size_t{12}}) {
    std::vector<std::int64_t> dims(rank);
    for (std::size_t index = 0; index < rank; ++index) dims[index] = static_cast<std::int64_t>(index) + 2;
    const Shape original(dims);
    ASSERT_EQ(original.rank(), rank);
    EXPECT_EQ(original.dims_vector(), dims);
    Shape copy = original;
    EXPECT_EQ(copy, original);
    EXPECT_NE(copy.dims().data(), original.dims().data()) << "a copy shares no storage, rank " << rank;
    Shape moved = std::move(copy);
    EXPECT_EQ(moved, original);
    EXPECT_EQ(copy.rank(), 0u) << "moved-from, rank " << rank;  // NOLINT(bugprone-use-after-move)
    Shape assigned{7};
    assigned = moved;
    EXPECT_EQ(assigned, original);
    assigned = Shape{1, 2, 3, 4, 5, 6, 7, 8};
    EXPECT_EQ(assigned.to_string(), "[1,2,3,4,5,6,7,8]");
    assigned = std::move(moved);
    EXPECT_EQ(assigned, original);
    EXPECT_EQ(assigned.num_elements(), rank == 0 ? 1 : original.num_elements());
  }
  EXPECT_NE((Shape{1, 2, 3, 4, 5, 6, 7}), (Shape{1, 2, 3, 4, 5, 6}));
  expect_invalid([] { Shape{1, 2, 3, 4, 5, 6, 7, -8}; }, {"dim 7", "-8"});
}

TEST(Shape, ScalarAndZeroSized) {
  const Shape scalar;
  EXPECT_EQ(scalar.rank(), 0u);
  EXPECT_EQ(scalar.num_elements(), 1);
  EXPECT_EQ(scalar.to_string(), "[]");
  EXPECT_EQ(scalar, Shape{});
  EXPECT_EQ(Shape(std::vector<std::int64_t>{}), scalar);
  EXPECT_EQ((Shape{3, 0, 5}).num_elements(), 0);
  // A zero dim makes the product 0 even when the other dims alone would overflow.
  EXPECT_EQ((Shape{kMax, kMax, 0}).num_elements(), 0);
  EXPECT_EQ(tp::byte_size(Shape{kMax, 0}, DType::f64), 0u);
}

TEST(Shape, NegativeDimsAreRejectedNamingTheDim) {
  expect_invalid([] { Shape{2, -3}; }, {"[core]", "dim 1", "-3", "[2,-3]"});
  expect_invalid([] { Shape(std::vector<std::int64_t>{-1}); }, {"dim 0", "-1", "[-1]"});
  expect_invalid(
      [] {
        Shape{4, 5, std::numeric_limits<std::int64_t>::min()};
      },
      {"dim 2", std::to_string(std::numeric_limits<std::int64_t>::min())});
}

TEST(Shape, DimIndexIsBoundsChecked) {
  const Shape shape{2, 3};
  expect_invalid([&] { (void)shape.dim(2); }, {"[core]", "index 2", "[2,3]", "rank 2"});
  expect_invalid([&] { (void)shape.dim(-1); }, {"index -1", "[2,3]"});
  expect_invalid([] { (void)Shape{}.dim(0); }, {"index 0", "[]", "rank 0"});
}

TEST(Shape, NumElementsDetectsInt64Overflow) {
  EXPECT_EQ((Shape{kMax}).num_elements(), kMax);
  EXPECT_EQ((Shape{kMax, 1, 1}).num_elements(), kMax);
  EXPECT_EQ((Shape{std::int64_t{1} << 31, std::int64_t{1} << 31}).num_elements(), std::int64_t{1} << 62);
  expect_invalid([] { (void)Shape{kMax, 2}.num_elements(); }, {"[core]", "[" + std::to_string(kMax) + ",2]"});
  expect_invalid(
      [] {
        (void)Shape{std::int64_t{1} << 32, std::int64_t{1} << 31}.num_elements();
      },
      {"[4294967296,2147483648]", "int64"});
  expect_invalid([] { (void)Shape{1 << 16, 1 << 16, 1 << 16, 1 << 16}.num_elements(); }, {"[65536,65536,65536,65536]"});
}

TEST(Shape, ByteSize) {
  EXPECT_EQ(tp::byte_size(Shape{784, 512}, DType::f32), 784u * 512u * 4u);
  EXPECT_EQ(tp::byte_size(Shape{784, 512}, DType::bf16), 784u * 512u * 2u);
  EXPECT_EQ(tp::byte_size(Shape{3}, DType::boolean), 3u);
  EXPECT_EQ(tp::byte_size(Shape{}, DType::f64), 8u);
  EXPECT_EQ(tp::byte_size(Shape{kMax}, DType::u8), static_cast<std::size_t>(kMax));
}

TEST(Shape, ByteSizeDetectsOverflowNamingShapeAndDType) {
  if (sizeof(std::size_t) == 8) {
    // 2^62 elements fit in int64, but 2^62 x 8 bytes do not fit in 64 bits.
    expect_invalid([] { (void)tp::byte_size(Shape{std::int64_t{1} << 62}, DType::f64); },
                   {"[core]", "[4611686018427387904]", "float64"});
    expect_invalid([] { (void)tp::byte_size(Shape{std::int64_t{1} << 61}, DType::f64); }, {"float64"});
    expect_invalid([] { (void)tp::byte_size(Shape{kMax}, DType::f32); }, {"float32"});
    // The largest counts that still fit.
    EXPECT_EQ(tp::byte_size(Shape{kMax}, DType::f16), std::numeric_limits<std::size_t>::max() - 1);
    EXPECT_EQ(tp::byte_size(Shape{std::int64_t{1} << 60}, DType::f64), std::size_t{1} << 63);
  }
  // An element-count overflow surfaces through byte_size too, still naming the shape.
  expect_invalid([] { (void)tp::byte_size(Shape{kMax, kMax}, DType::u8); }, {"[" + std::to_string(kMax)});
}

}  // namespace

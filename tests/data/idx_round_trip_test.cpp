// SPDX-License-Identifier: Apache-2.0
// IDX round trips: every element type, 1 to 4 dimensions, raw and gzip, written with write_idx and read back
// with read_idx; plus the exact on-disk layout (big-endian) against hand-written bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "data/support/data_test_support.hpp"
#include "tensorpool/data/idx.hpp"

namespace tp::data {
namespace {

using testing::TempDir;

// Values of type T covering the extremes, signs and (for floats) fractions, infinities and NaN.
template <typename T>
std::vector<T> sample_values(std::size_t count) {
  std::vector<T> special;
  if constexpr (std::is_floating_point_v<T>) {
    special = {T(0),
               T(-0.0),
               T(1.5),
               T(-2.25),
               std::numeric_limits<T>::max(),
               std::numeric_limits<T>::lowest(),
               std::numeric_limits<T>::denorm_min(),
               std::numeric_limits<T>::infinity(),
               std::numeric_limits<T>::quiet_NaN()};
  } else {
    special = {T(0), T(1), std::numeric_limits<T>::max(), std::numeric_limits<T>::min(),
               T(std::numeric_limits<T>::max() / 3)};
  }
  std::vector<T> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = i < special.size() ? special[i] : static_cast<T>(static_cast<std::int64_t>(i * 37 % 101) - 50);
  }
  return values;
}

template <typename T>
void check_round_trip(const TempDir& dir, const std::vector<std::int64_t>& dims, IdxCompression compression) {
  std::int64_t count = 1;
  for (const std::int64_t dim : dims) count *= dim;
  const std::vector<T> values = sample_values<T>(static_cast<std::size_t>(count));
  const IdxArray written = IdxArray::of<T>(dims, values);
  const auto path = dir / ("array_" + std::string(to_string(written.type)) + "_" + std::to_string(dims.size()) +
                           (compression == IdxCompression::gzip ? ".gz" : ""));
  write_idx(path, written, compression);
  if (compression == IdxCompression::gzip) {
    const std::vector<std::uint8_t> raw = testing::read_bytes(path);
    ASSERT_GE(raw.size(), 2u);
    EXPECT_EQ(raw[0], 0x1f);
    EXPECT_EQ(raw[1], 0x8b);
  }
  const IdxArray read = read_idx(path);
  EXPECT_EQ(read.type, written.type);
  EXPECT_EQ(read.dims, dims);
  EXPECT_EQ(read.bytes, written.bytes) << "type " << to_string(written.type) << ", " << dims.size() << " dims";
  const std::span<const T> back = read.values<T>();
  ASSERT_EQ(back.size(), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(values[i])) {
        EXPECT_TRUE(std::isnan(back[i]));
        continue;
      }
    }
    EXPECT_EQ(back[i], values[i]) << "element " << i;
  }
}

template <typename T>
void check_all_shapes() {
  TempDir dir;
  const std::vector<std::vector<std::int64_t>> shapes = {{11}, {3, 5}, {2, 3, 4}, {2, 1, 3, 2}};
  for (const auto& dims : shapes) {
    for (const IdxCompression compression : {IdxCompression::none, IdxCompression::gzip}) {
      SCOPED_TRACE(::testing::Message() << to_string(idx_type_of<T>()) << " " << dims.size() << " dims "
                                        << (compression == IdxCompression::gzip ? "gzip" : "raw"));
      check_round_trip<T>(dir, dims, compression);
    }
  }
}

TEST(IdxRoundTripTest, U8) { check_all_shapes<std::uint8_t>(); }
TEST(IdxRoundTripTest, I8) { check_all_shapes<std::int8_t>(); }
TEST(IdxRoundTripTest, I16) { check_all_shapes<std::int16_t>(); }
TEST(IdxRoundTripTest, I32) { check_all_shapes<std::int32_t>(); }
TEST(IdxRoundTripTest, F32) { check_all_shapes<float>(); }
TEST(IdxRoundTripTest, F64) { check_all_shapes<double>(); }

TEST(IdxRoundTripTest, FileLayoutIsBigEndian) {
  TempDir dir;
  const std::vector<std::int16_t> values = {0x0102, -2};
  write_idx(dir / "i16", IdxArray::of<std::int16_t>({2}, values));
  const std::vector<std::uint8_t> expected = {0x00, 0x00, 0x0B, 0x01, 0x00, 0x00, 0x00, 0x02, 0x01, 0x02, 0xFF, 0xFE};
  EXPECT_EQ(testing::read_bytes(dir / "i16"), expected);
}

TEST(IdxRoundTripTest, ReadsHandWrittenBigEndianValues) {
  TempDir dir;
  // f32 [2]: 1.0f (0x3F800000) and -2.5f (0xC0200000); i32 [1, 1]: 0x01020304.
  testing::write_bytes(dir / "f32", {0, 0, 0x0D, 1, 0, 0, 0, 2, 0x3F, 0x80, 0, 0, 0xC0, 0x20, 0, 0});
  testing::write_bytes(dir / "i32", {0, 0, 0x0C, 2, 0, 0, 0, 1, 0, 0, 0, 1, 1, 2, 3, 4});
  const IdxArray floats = read_idx(dir / "f32");
  ASSERT_EQ(floats.values<float>().size(), 2u);
  EXPECT_EQ(floats.values<float>()[0], 1.0f);
  EXPECT_EQ(floats.values<float>()[1], -2.5f);
  const IdxArray ints = read_idx(dir / "i32");
  EXPECT_EQ(ints.dims, (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(ints.values<std::int32_t>()[0], 0x01020304);
}

TEST(IdxRoundTripTest, ArrayInvariantIsChecked) {
  const std::string message = testing::invalid_argument_message([] {
    IdxArray{.type = IdxType::i32, .dims = {2, 2}, .bytes = std::vector<std::uint8_t>(15)}.validate();
  });
  EXPECT_NE(message.find("[2,2]"), std::string::npos) << message;
  EXPECT_NE(message.find("15"), std::string::npos) << message;
  testing::invalid_argument_message([] { IdxArray{.type = IdxType::u8, .dims = {}, .bytes = {}}.validate(); });
  testing::invalid_argument_message([] {
    IdxArray{.type = IdxType::u8, .dims = {1, 1, 1, 1, 1}, .bytes = {1}}.validate();
  });
  testing::invalid_argument_message([] { (void)testing::pattern_u8({2}).values<float>(); });
}

}  // namespace
}  // namespace tp::data

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/dtype.hpp"

#include <gtest/gtest.h>

#include <array>
#include <sstream>
#include <string>

#include "tensorpool/core/error.hpp"

namespace {

using tp::DType;

constexpr std::array<DType, 8> kAll{DType::f32, DType::f16, DType::bf16, DType::f64,
                                    DType::i32, DType::i64, DType::u8,   DType::boolean};

TEST(DType, SizesNamesAndFloatingness) {
  struct Expected {
    DType dtype;
    std::size_t size;
    const char* name;
    const char* short_name;
    bool floating;
  };
  const std::array<Expected, 8> table{{{DType::f32, 4, "float32", "f32", true},
                                       {DType::f16, 2, "float16", "f16", true},
                                       {DType::bf16, 2, "bfloat16", "bf16", true},
                                       {DType::f64, 8, "float64", "f64", true},
                                       {DType::i32, 4, "int32", "i32", false},
                                       {DType::i64, 8, "int64", "i64", false},
                                       {DType::u8, 1, "uint8", "u8", false},
                                       {DType::boolean, 1, "bool", "bool", false}}};
  for (const Expected& row : table) {
    EXPECT_EQ(tp::size_of(row.dtype), row.size) << row.name;
    EXPECT_EQ(tp::name_of(row.dtype), row.name);
    EXPECT_EQ(tp::is_floating(row.dtype), row.floating) << row.name;
    EXPECT_EQ(tp::parse_dtype(row.name), row.dtype) << row.name;
    EXPECT_EQ(tp::parse_dtype(row.short_name), row.dtype) << row.short_name;
  }
}

TEST(DType, NameRoundTripsAndPrints) {
  for (DType dtype : kAll) {
    EXPECT_EQ(tp::parse_dtype(tp::name_of(dtype)), dtype);
    std::ostringstream stream;
    stream << dtype;
    EXPECT_EQ(stream.str(), tp::name_of(dtype));
  }
}

TEST(DType, RejectsUnknownNamesNamingTheTextAndListingAccepted) {
  for (const char* bad : {"", "float", "Float32", "F32", " f32", "f32 ", "int8", "boolean", "half", "fp16", "x"}) {
    try {
      (void)tp::parse_dtype(bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const tp::InvalidArgument& error) {
      const std::string text = error.what();
      EXPECT_NE(text.find(std::string("'") + bad + "'"), std::string::npos) << text;
      for (DType dtype : kAll) {
        EXPECT_NE(text.find(tp::name_of(dtype)), std::string::npos) << text;
      }
      for (const char* short_name : {"f32", "f16", "bf16", "f64", "i32", "i64", "u8"}) {
        EXPECT_NE(text.find(short_name), std::string::npos) << text;
      }
      EXPECT_EQ(text.rfind("[core] ", 0), 0u) << text;
    }
  }
}

TEST(DType, RejectsOutOfRangeEnumValues) {
  const auto bogus = static_cast<DType>(200);
  EXPECT_THROW((void)tp::size_of(bogus), tp::InvalidArgument);
  EXPECT_THROW((void)tp::name_of(bogus), tp::InvalidArgument);
  EXPECT_THROW((void)tp::is_floating(bogus), tp::InvalidArgument);
  try {
    (void)tp::size_of(bogus);
    ADD_FAILURE() << "size_of accepted DType 200";
  } catch (const tp::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("200"), std::string::npos) << error.what();
  }
}

}  // namespace

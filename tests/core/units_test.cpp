// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/units.hpp"

#include <gtest/gtest.h>

#include "tensorpool/core/error.hpp"

namespace {

TEST(Units, ParsesPlainAndSuffixedSizes) {
  EXPECT_EQ(tp::parse_bytes("1073741824", "x"), tp::kGiB);
  EXPECT_EQ(tp::parse_bytes("512MiB", "x"), 512 * tp::kMiB);
  EXPECT_EQ(tp::parse_bytes(" 1.5GiB ", "x"), tp::kGiB + tp::kGiB / 2);
  EXPECT_EQ(tp::parse_bytes("64KB", "x"), 64 * tp::kKiB);
  EXPECT_EQ(tp::parse_bytes("2 m", "x"), 2 * tp::kMiB);
}

TEST(Units, RejectsGarbageNamingTheInput) {
  for (const char* bad : {"", "-1", "12XB", "abc", "1.2.3G", "99999999999999999999", "1e3"}) {
    try {
      (void)tp::parse_bytes(bad, "--capacity");
      FAIL() << "accepted '" << bad << "'";
    } catch (const tp::InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("--capacity"), std::string::npos) << error.what();
    }
  }
}

TEST(Units, FormatsBinaryUnits) {
  EXPECT_EQ(tp::format_bytes(255), "255 B");
  EXPECT_EQ(tp::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(tp::format_bytes(3 * tp::kGiB), "3.00 GiB");
}

TEST(Error, PrefixesComponentAndSite) {
  try {
    TP_THROW(tp::InvalidArgument, "memory", "value ", 3, " is bad");
  } catch (const tp::InvalidArgument& error) {
    const std::string text = error.what();
    EXPECT_EQ(text.rfind("[memory] value 3 is bad (units_test.cpp:", 0), 0u) << text;
  }
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/units.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "tensorpool/core/error.hpp"

namespace tp {

std::string format_bytes(std::size_t bytes) {
  static constexpr std::array<const char*, 5> kUnits{"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < kKiB) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  std::array<char, 32> buffer{};
  std::snprintf(buffer.data(), buffer.size(), "%.2f %s", value, kUnits[unit]);
  return buffer.data();
}

std::size_t parse_bytes(std::string_view text, std::string_view what) {
  auto fail = [&](std::string_view why) -> std::size_t {
    TP_THROW(InvalidArgument, "config", what, " = '", text, "' is not a byte size (", why,
             "); write an integer number of bytes or a number with a unit, e.g. 1073741824, 512MiB, 1.5GiB");
  };
  std::size_t begin = 0;
  while (begin < text.size() && std::isspace(static_cast<unsigned char>(text[begin])) != 0) ++begin;
  std::size_t end = text.size();
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1])) != 0) --end;
  const std::string_view body = text.substr(begin, end - begin);
  if (body.empty()) return fail("empty");
  if (body.front() == '-') return fail("negative");

  std::size_t number_end = 0;
  while (number_end < body.size() &&
         (std::isdigit(static_cast<unsigned char>(body[number_end])) != 0 || body[number_end] == '.')) {
    ++number_end;
  }
  if (number_end == 0) return fail("no number");
  const std::string_view number = body.substr(0, number_end);
  std::string_view suffix = body.substr(number_end);
  while (!suffix.empty() && suffix.front() == ' ') suffix.remove_prefix(1);

  std::size_t multiplier = 1;
  std::string upper;
  for (char c : suffix) upper.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  if (upper.empty() || upper == "B") {
    multiplier = 1;
  } else if (upper == "K" || upper == "KB" || upper == "KIB") {
    multiplier = kKiB;
  } else if (upper == "M" || upper == "MB" || upper == "MIB") {
    multiplier = kMiB;
  } else if (upper == "G" || upper == "GB" || upper == "GIB") {
    multiplier = kGiB;
  } else if (upper == "T" || upper == "TB" || upper == "TIB") {
    multiplier = kGiB * 1024;
  } else {
    return fail("unknown unit");
  }

  if (number.find('.') == std::string_view::npos) {
    std::uint64_t value = 0;
    const auto [ptr, error] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (error != std::errc{} || ptr != number.data() + number.size()) return fail("bad number");
    if (value > std::numeric_limits<std::size_t>::max() / multiplier) return fail("too large");
    return static_cast<std::size_t>(value) * multiplier;
  }
  double value = 0;
  const auto [ptr, error] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (error != std::errc{} || ptr != number.data() + number.size()) return fail("bad number");
  const double bytes = std::floor(value * static_cast<double>(multiplier));
  if (!(bytes < static_cast<double>(std::numeric_limits<std::size_t>::max()))) return fail("too large");
  return static_cast<std::size_t>(bytes);
}

}  // namespace tp

// SPDX-License-Identifier: Apache-2.0
#include "option_checks.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <system_error>
#include <utility>

namespace tp::cli {
namespace {

// 1234567 -> "1,234,567"; -1024 -> "-1,024".
template <typename Integer>
std::string grouped(Integer value) {
  std::string digits = std::to_string(value);
  const std::size_t first = digits.front() == '-' ? 1 : 0;
  for (std::size_t end = digits.size(); end > first + 3; end -= 3) digits.insert(end - 3, ",");
  return digits;
}

// The accepted range in words, or "" when both bounds are only the type's limits.
std::string range_text(std::int64_t min, std::uint64_t max, bool unbounded_below, bool unbounded_above) {
  if (!unbounded_below && !unbounded_above) return "from " + grouped(min) + " to " + grouped(max);
  if (!unbounded_below) return ">= " + grouped(min);
  if (!unbounded_above) return "<= " + grouped(max);
  return "";
}

// Whether `text` is a whole number, and if so whether it lies below or above [min, max].
struct Parsed {
  bool whole_number = false;
  bool too_small = false;
  bool too_large = false;
};

Parsed parse_whole_number(const std::string& text, std::int64_t min, std::uint64_t max) {
  Parsed parsed;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (!text.empty() && text.front() == '-') {
    std::int64_t value = 0;
    const auto [rest, error] = std::from_chars(begin, end, value);
    if (rest != end || (error != std::errc{} && error != std::errc::result_out_of_range)) return parsed;
    parsed.whole_number = true;
    parsed.too_small = error == std::errc::result_out_of_range || value < min;
    return parsed;
  }
  std::uint64_t value = 0;
  const auto [rest, error] = std::from_chars(begin, end, value);
  if (text.empty() || rest != end || (error != std::errc{} && error != std::errc::result_out_of_range)) return parsed;
  parsed.whole_number = true;
  parsed.too_large = error == std::errc::result_out_of_range || value > max;
  parsed.too_small = min > 0 && error == std::errc{} && value < static_cast<std::uint64_t>(min);
  return parsed;
}

bool is_boolean_word(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  static constexpr const char* kWords[] = {"true", "false", "1", "0", "yes", "no", "on", "off"};
  return std::any_of(std::begin(kWords), std::end(kWords), [&](const char* word) { return text == word; });
}

bool has_check(CLI::Option& option) {
  try {
    (void)option.get_validator("");  // the first check; throws when there is none
    return true;
  } catch (const CLI::OptionNotFound&) {
    return false;
  }
}

bool is_help_or_version(const CLI::App& app, const CLI::Option& option) {
  return &option == app.get_help_ptr() || &option == app.get_help_all_ptr() || option.get_name() == "--version";
}

}  // namespace

CLI::Validator whole_number_between(std::int64_t min, std::uint64_t max, bool unbounded_below, bool unbounded_above) {
  const std::string range = range_text(min, max, unbounded_below, unbounded_above);
  CLI::Validator validator(
      [=](std::string& text) -> std::string {
        const Parsed parsed = parse_whole_number(text, min, max);
        if (parsed.whole_number && !parsed.too_small && !parsed.too_large) return {};
        if (parsed.too_large && unbounded_above) {
          return "'" + text + "' is too large; the most it takes is " + grouped(max);
        }
        if (parsed.too_small && unbounded_below) {
          return "'" + text + "' is too small; the least it takes is " + grouped(min);
        }
        return "'" + text + "' is not a whole number" + (range.empty() ? "" : " " + range);
      },
      range);
  return validator;
}

CLI::Validator one_of(std::vector<std::string> names) {
  std::string list;
  for (std::size_t index = 0; index < names.size(); ++index) list += (index == 0 ? "" : ", ") + names[index];
  return CLI::Validator(
      [names = std::move(names), list](std::string& text) -> std::string {
        if (std::find(names.begin(), names.end(), text) != names.end()) return {};
        return "'" + text + "' is not one of " + list;
      },
      list);
}

CLI::Validator true_or_false(const std::string& name, bool is_flag) {
  return CLI::Validator(
      [name, is_flag](std::string& text) -> std::string {
        if (is_boolean_word(text)) return {};
        if (is_flag) return "'" + text + "' is not true or false; write " + name + " alone, or " + name + "=false";
        return "'" + text + "' is not true or false; write " + name + " true or " + name + " false";
      },
      "");
}

void check_every_option(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (is_help_or_version(app, *option) || has_check(*option)) continue;
    const std::string type = option->get_type_name();
    if (option->get_expected_max() == 0) {  // a flag: it takes no argument of its own
      option->check(true_or_false(option->get_name(), true));
    } else if (type == "BOOLEAN") {
      option->check(true_or_false(option->get_name(), false));
    } else if (type == "INT") {
      option->check(whole_number<std::int64_t>());
    } else if (type == "UINT") {
      option->check(whole_number<std::uint64_t>());
    }
  }
  for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) check_every_option(*command);
}

}  // namespace tp::cli

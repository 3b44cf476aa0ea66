// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checks of option values at parse time, with messages a user can act on: each names the flag (CLI11 puts
// "--flag: " in front of a check's message), repeats the value given and says what is accepted, with numbers
// written readably ("from 1 to 1,024", ">= 0"), never a type's full range. CLI11's own validators
// (PositiveNumber, Range...) print a double's whole range and its conversions say only "Could not convert",
// so every command uses these instead; check_every_option() gives each option without a check the one its
// type needs, so a new option cannot fall back to CLI11's messages.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tp::cli {

// A whole number in [min, max], written in decimal. `unbounded_below` / `unbounded_above`: the bound is only
// the bound type's limit, so the message leaves it out ("a whole number >= 0" rather than "... to 2^63 - 1").
CLI::Validator whole_number_between(std::int64_t min, std::uint64_t max, bool unbounded_below, bool unbounded_above);

// A whole number that an Integer holds, in [min, max] (by default the type's whole range).
template <typename Integer>
CLI::Validator whole_number(Integer min = std::numeric_limits<Integer>::min(),
                            Integer max = std::numeric_limits<Integer>::max()) {
  static_assert(std::numeric_limits<Integer>::is_integer);
  // An unsigned type's 0 is a bound worth saying (">= 0"): "-1" is a likely mistake for it.
  const bool unbounded_below = std::numeric_limits<Integer>::is_signed && min == std::numeric_limits<Integer>::min();
  return whole_number_between(static_cast<std::int64_t>(min), static_cast<std::uint64_t>(max), unbounded_below,
                              max == std::numeric_limits<Integer>::max());
}

// One of `names`, exactly as written.
CLI::Validator one_of(std::vector<std::string> names);

// true or false (also 1/0, yes/no, on/off, any case) for the option `name`; a flag (`is_flag`: given alone,
// or as --flag=false) says so in its message.
CLI::Validator true_or_false(const std::string& name, bool is_flag);

// Gives every option of `app` and of its subcommands (recursively) that has no check the one its type needs:
// booleans and flags true_or_false, signed integers whole_number<std::int64_t>, unsigned ones
// whole_number<std::uint64_t> (so "-1" is refused instead of wrapping around). Options bound to a narrower
// type than these, or with a narrower meaning, carry an explicit whole_number check. Help and version flags
// are left alone. Call once, after every command is registered.
void check_every_option(CLI::App& app);

}  // namespace tp::cli

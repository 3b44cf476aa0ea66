// SPDX-License-Identifier: Apache-2.0
#pragma once
// The library's one diagnostic channel. Every message the library prints goes through here as one line,
// "[component] message", to a sink (stderr unless replaced), filtered by a process-wide level:
//
//   TP_LOG(warning, "data", name, ": pinned staging memory refused (", why, ")");
//
// Levels, most to least severe: error, warning, info, debug; `off` prints nothing. The level is TP_LOG_LEVEL
// (off|error|warning|info|debug, any case, surrounding spaces ignored), read once at the first message; unset
// means info, so every error, warning and notice prints as before the logger existed. A malformed value cannot
// be an exception there (the first message may come from a destructor or a noexcept deallocation): the
// logger prints one warning naming the variable, the value and the accepted values, and uses info. Programs
// that want a bad value refused call set_level(parse_level_env(getenv("TP_LOG_LEVEL"))) at start; the
// tensorpool CLI does. set_level overrides the variable for the rest of the process.
//
// Invariants: the sink sees whole lines, one call at a time (calls are serialized by one mutex, so lines
// from threads never interleave and a sink needs no lock of its own); a message below the level costs one
// relaxed atomic load, nothing is formatted; logging never throws (a failure to format or to write loses the
// line, never the caller). A sink must not log (it would wait for itself).
//
// Some lines bypass the level, through write_always: fatal errors printed just before std::abort, and the
// warning about a malformed TP_LOG_LEVEL.

#include <atomic>
#include <functional>
#include <string>
#include <string_view>

#include "tensorpool/core/error.hpp"

namespace tp::log {

enum class Level : int { off = 0, error = 1, warning = 2, info = 3, debug = 4 };

std::string_view to_string(Level level) noexcept;

// "warning" -> Level::warning (any case, spaces around ignored). Anything else, empty included, throws
// tp::InvalidArgument naming TP_LOG_LEVEL, the text and the accepted values.
Level parse_level(std::string_view text);

// The level the value of TP_LOG_LEVEL selects: nullptr (unset) -> info, else parse_level(value).
Level parse_level_env(const char* value);

// As parse_level_env, but a malformed value prints one warning (through write_always) and gives info.
Level level_from_env_or_default(const char* value) noexcept;

// One line as the sink receives it.
struct Record {
  Level level;
  std::string_view component;  // "memory", "data"...: printed as "[memory] "
  std::string_view message;
};

// "[component] message" (no newline).
std::string format_line(const Record& record);

using Sink = std::function<void(const Record&)>;

// Replaces the sink and returns the previous one; an empty Sink restores the default (one line to stderr).
Sink set_sink(Sink sink);

// The level in force: TP_LOG_LEVEL's on first use, or the last set_level.
Level level() noexcept;

// Sets the level for the rest of the process (TP_LOG_LEVEL is no longer read) and returns the previous one.
Level set_level(Level level) noexcept;

namespace detail {
// -1 until the level is known, then a Level's value. Read relaxed: a level change orders nothing else.
extern std::atomic<int> threshold;
int read_threshold() noexcept;  // reads TP_LOG_LEVEL once and returns the level then in force
}  // namespace detail

// Whether a message at `level` prints now. Cheap: one atomic load once the level is known.
inline bool enabled(Level level) noexcept {
  int threshold = detail::threshold.load(std::memory_order_relaxed);
  if (threshold < 0) threshold = detail::read_threshold();
  return level != Level::off && static_cast<int>(level) <= threshold;
}

// Sends one line to the sink if `level` is enabled.
void write(Level level, std::string_view component, std::string_view message) noexcept;

// Sends one line to the sink whatever the level: fatal errors before an abort, output asked for explicitly.
void write_always(Level level, std::string_view component, std::string_view message) noexcept;

namespace detail {
template <typename... Parts>
void write_parts(Level level, std::string_view component, const Parts&... parts) noexcept {
  try {
    write_always(level, component, ::tp::detail::concat(parts...));
  } catch (...) {  // out of memory while formatting: the line is lost, the caller goes on
  }
}
}  // namespace detail

}  // namespace tp::log

// TP_LOG(info, "train", "resumed from step ", step): formats and writes only when the level is enabled.
#define TP_LOG(level_name, component, ...)                                                    \
  do {                                                                                        \
    if (::tp::log::enabled(::tp::log::Level::level_name)) {                                   \
      ::tp::log::detail::write_parts(::tp::log::Level::level_name, (component), __VA_ARGS__); \
    }                                                                                         \
  } while (false)

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/log.hpp"

#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

namespace tp::log {
namespace detail {

constinit std::atomic<int> threshold{-1};

}  // namespace detail

namespace {

constexpr std::array<std::pair<std::string_view, Level>, 5> kLevels{{
    {"off", Level::off},
    {"error", Level::error},
    {"warning", Level::warning},
    {"info", Level::info},
    {"debug", Level::debug},
}};

constexpr Level kDefaultLevel = Level::info;

// The sink and the lock that serializes lines. Allocated once and never destroyed: a device or allocator
// destroyed at exit, after this file's statics would be, may still print.
struct SinkState {
  std::mutex mutex;
  Sink sink;  // guarded by mutex; empty: the default sink
};

SinkState& sink_state() {
  static SinkState* const state = new SinkState;
  return *state;
}

// One fprintf per line: stderr is unbuffered, so the line leaves in one write, whole even when several
// processes (MPI ranks) share the terminal.
void write_to_stderr(const Record& record) noexcept {
  std::fprintf(stderr, "[%.*s] %.*s\n", static_cast<int>(record.component.size()), record.component.data(),
               static_cast<int>(record.message.size()), record.message.data());
  std::fflush(stderr);
}

// The level a TP_LOG_LEVEL value selects, or the default with `problem` set to why the value was refused.
Level resolve(const char* value, std::string& problem) noexcept {
  try {
    return parse_level_env(value);
  } catch (const std::exception& error) {
    try {
      std::string_view what = error.what();
      if (what.starts_with("[log] ")) what.remove_prefix(6);  // the warning gets its own "[log] " prefix
      problem = std::string(what) + "; using " + std::string(to_string(kDefaultLevel));
    } catch (...) {  // out of memory: the level still falls back, the warning is lost
    }
    return kDefaultLevel;
  }
}

}  // namespace

std::string_view to_string(Level level) noexcept {
  for (const auto& [name, value] : kLevels) {
    if (value == level) return name;
  }
  return "unknown";
}

Level parse_level(std::string_view text) {
  std::string_view trimmed = text;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.front())) != 0) trimmed.remove_prefix(1);
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back())) != 0) trimmed.remove_suffix(1);
  std::string lower(trimmed);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& [name, value] : kLevels) {
    if (lower == name) return value;
  }
  TP_THROW(InvalidArgument, "log", "TP_LOG_LEVEL='", text,
           "' is not valid; accepted: off, error, warning, info, debug (any case; unset means info)");
}

Level parse_level_env(const char* value) { return value == nullptr ? kDefaultLevel : parse_level(value); }

Level level_from_env_or_default(const char* value) noexcept {
  std::string problem;
  const Level level = resolve(value, problem);
  if (!problem.empty()) write_always(Level::warning, "log", problem);
  return level;
}

std::string format_line(const Record& record) {
  std::string line;
  line.reserve(record.component.size() + record.message.size() + 3);
  line.append("[").append(record.component).append("] ").append(record.message);
  return line;
}

Sink set_sink(Sink sink) {
  SinkState& state = sink_state();
  const std::lock_guard lock(state.mutex);
  return std::exchange(state.sink, std::move(sink));
}

Level level() noexcept {
  int threshold = detail::threshold.load(std::memory_order_relaxed);
  if (threshold < 0) threshold = detail::read_threshold();
  return static_cast<Level>(threshold);
}

Level set_level(Level level) noexcept {
  const int previous = detail::threshold.exchange(static_cast<int>(level), std::memory_order_relaxed);
  if (previous >= 0) return static_cast<Level>(previous);
  std::string ignored;  // the variable is overridden before it was ever read: no warning about its value
  return resolve(std::getenv("TP_LOG_LEVEL"), ignored);
}

int detail::read_threshold() noexcept {
  std::string problem;
  const Level from_env = resolve(std::getenv("TP_LOG_LEVEL"), problem);
  int expected = -1;
  // Only the thread that sets the level reports a bad value, so the warning prints once; a set_level that
  // came first wins over the variable.
  if (threshold.compare_exchange_strong(expected, static_cast<int>(from_env), std::memory_order_relaxed)) {
    if (!problem.empty()) write_always(Level::warning, "log", problem);
    return static_cast<int>(from_env);
  }
  return expected;
}

void write(Level level, std::string_view component, std::string_view message) noexcept {
  if (enabled(level)) write_always(level, component, message);
}

void write_always(Level level, std::string_view component, std::string_view message) noexcept {
  const Record record{level, component, message};
  try {
    SinkState& state = sink_state();
    const std::lock_guard lock(state.mutex);
    if (state.sink) {
      state.sink(record);
    } else {
      write_to_stderr(record);
    }
  } catch (...) {  // a sink that throws loses its line; the caller (often noexcept) goes on
  }
}

}  // namespace tp::log

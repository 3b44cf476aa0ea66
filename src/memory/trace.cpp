// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/trace.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <istream>
#include <ostream>
#include <unordered_map>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/memory_resource.hpp"

namespace tp::memory {
namespace {

constexpr std::int64_t kNanosPerSecond = 1'000'000'000;

std::string hex(std::uintptr_t value) {
  std::array<char, 24> buffer{};
  buffer[0] = '0';
  buffer[1] = 'x';
  const auto result = std::to_chars(buffer.data() + 2, buffer.data() + buffer.size(), value, 16);
  return std::string(buffer.data(), result.ptr);
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// Parses all of `text` as an unsigned integer in `base`; false on anything else (sign, junk, overflow).
template <typename Integer>
bool parse_integer(std::string_view text, Integer& value, int base = 10) {
  if (text.empty()) return false;
  const auto [ptr, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  return error == std::errc{} && ptr == text.data() + text.size();
}

bool parse_hex(std::string_view text, std::uint64_t& value) {
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) text.remove_prefix(2);
  return parse_integer(text, value, 16);
}

bool parse_stream(std::string_view text, std::uint64_t& value) {
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) return parse_hex(text, value);
  return parse_integer(text, value);
}

// Nanoseconds from a fraction of a second written after the '.': at most 9 digits count, more are truncated.
bool parse_fraction(std::string_view digits, std::int64_t& nanos) {
  if (digits.empty()) return false;
  nanos = 0;
  std::int64_t scale = kNanosPerSecond;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    scale /= 10;
    nanos += (c - '0') * scale;
  }
  return true;
}

// Integer nanoseconds, decimal seconds, or HH:MM:SS[.ffffff] (nanoseconds since midnight).
bool parse_time(std::string_view text, std::int64_t& nanos) {
  std::int64_t fraction = 0;
  const std::size_t dot = text.find('.');
  std::string_view whole = text;
  if (dot != std::string_view::npos) {
    if (!parse_fraction(text.substr(dot + 1), fraction)) return false;
    whole = text.substr(0, dot);
  }
  std::int64_t seconds = 0;
  if (whole.find(':') != std::string_view::npos) {
    const std::size_t first = whole.find(':');
    const std::size_t second = whole.find(':', first + 1);
    if (second == std::string_view::npos) return false;
    std::int64_t hours = 0;
    std::int64_t minutes = 0;
    std::int64_t secs = 0;
    if (!parse_integer(whole.substr(0, first), hours) ||
        !parse_integer(whole.substr(first + 1, second - first - 1), minutes) ||
        !parse_integer(whole.substr(second + 1), secs)) {
      return false;
    }
    if (hours < 0 || hours > 1'000'000 || minutes < 0 || minutes > 59 || secs < 0 || secs > 59) return false;
    seconds = hours * 3600 + minutes * 60 + secs;
  } else if (dot == std::string_view::npos) {
    return parse_integer(whole, nanos) && nanos >= 0;  // integer nanoseconds
  } else if (!parse_integer(whole, seconds) || seconds < 0) {
    return false;
  }
  if (seconds > (std::numeric_limits<std::int64_t>::max() - fraction) / kNanosPerSecond) return false;
  nanos = seconds * kNanosPerSecond + fraction;
  return true;
}

bool parse_action(std::string_view text, TraceAction& action) {
  if (text == "allocate") {
    action = TraceAction::allocate;
  } else if (text == "free" || text == "deallocate") {
    action = TraceAction::free;
  } else if (text == "allocate failure") {
    action = TraceAction::allocate_failure;
  } else {
    return false;
  }
  return true;
}

struct Location {
  std::string_view source;
  std::size_t line;
};

std::ostream& operator<<(std::ostream& stream, const Location& location) {
  return stream << location.source << ':' << location.line;
}

TraceEvent parse_line(std::string_view line, const Location& where) {
  std::array<std::string_view, 6> fields{};
  std::size_t count = 0;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = line.find(',', begin);
    const std::string_view field = line.substr(begin, comma == std::string_view::npos ? line.npos : comma - begin);
    if (count < fields.size()) fields[count] = trim(field);
    ++count;
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  if (count != fields.size()) {
    TP_THROW(DataError, "trace", where, ": ", count, " columns, expected 6 (", kTraceHeader,
             "); fix the line or regenerate the trace");
  }
  TraceEvent event;
  if (!parse_integer(fields[0], event.thread)) {
    TP_THROW(DataError, "trace", where, ": Thread '", fields[0],
             "' is not an unsigned integer; write a thread id such as 0");
  }
  if (!parse_time(fields[1], event.time_ns)) {
    TP_THROW(DataError, "trace", where, ": Time '", fields[1],
             "' is not a time; write integer nanoseconds (1520), seconds (12.000001520) or HH:MM:SS.ffffff");
  }
  if (!parse_action(fields[2], event.action)) {
    TP_THROW(DataError, "trace", where, ": Action '", fields[2],
             "' is unknown; write one of allocate, free, allocate failure");
  }
  std::uint64_t pointer = 0;
  if (!parse_hex(fields[3], pointer)) {
    TP_THROW(DataError, "trace", where, ": Pointer '", fields[3], "' is not a hex address; write it as 0x7f0000000000");
  }
  event.pointer = static_cast<std::uintptr_t>(pointer);
  if (!parse_integer(fields[4], event.size)) {
    TP_THROW(DataError, "trace", where, ": Size '", fields[4], "' is not an unsigned integer number of bytes");
  }
  if (!parse_stream(fields[5], event.stream)) {
    TP_THROW(DataError, "trace", where, ": Stream '", fields[5],
             "' is not an unsigned integer; write 0x0 for the default stream");
  }
  return event;
}

}  // namespace

std::string_view to_string(TraceAction action) noexcept {
  switch (action) {
    case TraceAction::allocate: return "allocate";
    case TraceAction::free: return "free";
    case TraceAction::allocate_failure: return "allocate failure";
  }
  return "unknown";
}

Trace::Trace(std::string source, std::vector<TraceEvent> events, std::span<const std::size_t> line_numbers)
    : source_(std::move(source)), events_(std::move(events)), partners_(events_.size(), kNoEvent) {
  line_numbers_.assign(line_numbers.begin(), line_numbers.end());
  auto where = [&](std::size_t index) { return Location{source_, line(index)}; };
  std::unordered_map<std::uintptr_t, std::size_t> live;   // pointer -> index of its allocate
  std::unordered_map<std::uintptr_t, std::size_t> freed;  // pointer -> index of its last free, while not live
  std::unordered_map<std::uint64_t, bool> seen_threads;
  std::size_t live_bytes = 0;
  for (std::size_t index = 0; index < events_.size(); ++index) {
    const TraceEvent& event = events_[index];
    if (seen_threads.emplace(event.thread, true).second) threads_.push_back(event.thread);
    if (event.action != TraceAction::free && event.size == 0) {
      TP_THROW(DataError, "trace", where(index), ": ", to_string(event.action),
               " of 0 bytes; sizes must be at least 1 (drop the line)");
    }
    if (event.size > kMaxAllocationBytes) {
      TP_THROW(DataError, "trace", where(index), ": size ", event.size, " is above the largest allocation any ",
               "resource accepts (", kMaxAllocationBytes, " bytes); the size column is corrupt");
    }
    switch (event.action) {
      case TraceAction::allocate_failure: ++failure_count_; break;
      case TraceAction::allocate: {
        if (event.pointer == 0) {
          TP_THROW(DataError, "trace", where(index),
                   ": allocate returned pointer 0x0; a failed allocation is logged as 'allocate failure'");
        }
        const auto [it, inserted] = live.emplace(event.pointer, index);
        if (!inserted) {
          TP_THROW(DataError, "trace", where(index), ": allocate returned ", hex(event.pointer),
                   ", which is still live (allocated on line ", where(it->second).line,
                   " and not freed); the trace is missing a free, fix or regenerate it");
        }
        freed.erase(event.pointer);
        ++allocation_count_;
        if (live_bytes > kMaxAllocationBytes - event.size) {
          TP_THROW(DataError, "trace", where(index), ": live bytes pass ", kMaxAllocationBytes,
                   ", more than any device holds; the size column is corrupt");
        }
        live_bytes += event.size;
        peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes);
        break;
      }
      case TraceAction::free: {
        const auto it = live.find(event.pointer);
        if (it == live.end()) {
          const auto previous = freed.find(event.pointer);
          if (previous != freed.end()) {
            TP_THROW(DataError, "trace", where(index), ": double free of ", hex(event.pointer),
                     " (already freed on line ", where(previous->second).line, "); remove one of the frees");
          }
          TP_THROW(DataError, "trace", where(index), ": free of unknown pointer ", hex(event.pointer),
                   " (never allocated); the trace is truncated or corrupt, record it from the start");
        }
        const std::size_t allocation = it->second;
        if (events_[allocation].size != event.size) {
          TP_THROW(DataError, "trace", where(index), ": free of ", hex(event.pointer), " with size ", event.size,
                   " but it was allocated with size ", events_[allocation].size, " on line ", where(allocation).line,
                   "; a free must name the allocated size");
        }
        partners_[allocation] = index;
        partners_[index] = allocation;
        live.erase(it);
        freed[event.pointer] = index;
        ++free_count_;
        live_bytes -= event.size;
        break;
      }
    }
  }
}

Trace read_trace(std::istream& input, std::string_view source_name) {
  std::string line;
  std::size_t line_number = 0;
  std::vector<TraceEvent> events;
  std::vector<std::size_t> line_numbers;
  bool have_header = false;
  while (std::getline(input, line)) {
    ++line_number;
    std::string_view text = line;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (!have_header) {
      if (line_number == 1 && text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // UTF-8 byte-order mark
      if (text != kTraceHeader) {
        TP_THROW(DataError, "trace", Location{source_name, line_number}, ": header is '", text, "', expected '",
                 kTraceHeader, "'; this is not an allocation trace (or its header line is missing)");
      }
      have_header = true;
      continue;
    }
    if (trim(text).empty()) continue;
    events.push_back(parse_line(text, Location{source_name, line_number}));
    line_numbers.push_back(line_number);
  }
  if (input.bad()) {
    TP_THROW(DataError, "trace", source_name, ": read error after line ", line_number, "; check the file");
  }
  if (!have_header) {
    TP_THROW(DataError, "trace", source_name, ":1: the file is empty, expected the header '", kTraceHeader,
             "'; pass a trace written by the LoggingAdaptor or `tensorpool trace generate`");
  }
  return Trace(std::string(source_name), std::move(events), line_numbers);
}

Trace read_trace_file(const std::filesystem::path& path) {
  std::ifstream input(path, std::ios::binary);
  if (!input) {
    TP_THROW(DataError, "trace", path.string(), ": cannot open the trace file; check the path (",
             std::filesystem::exists(path) ? "it exists but is not readable" : "no such file", ")");
  }
  return read_trace(input, path.string());
}

std::string format_trace_line(const TraceEvent& event) {
  auto append = [](std::string& out, auto value, int base) {
    std::array<char, 24> digits{};
    const auto result = std::to_chars(digits.data(), digits.data() + digits.size(), value, base);
    out.append(digits.data(), result.ptr);
  };
  std::string line;
  line.reserve(64);
  append(line, event.thread, 10);
  line.push_back(',');
  append(line, event.time_ns, 10);
  line.push_back(',');
  line.append(to_string(event.action));
  line.append(",0x");
  append(line, event.pointer, 16);
  line.push_back(',');
  append(line, event.size, 10);
  line.append(",0x");
  append(line, event.stream, 16);
  return line;
}

void write_trace(std::ostream& output, const Trace& trace) {
  output << kTraceHeader << '\n';
  for (const TraceEvent& event : trace.events()) output << format_trace_line(event) << '\n';
}

void write_trace_file(const std::filesystem::path& path, const Trace& trace) {
  std::ofstream output(path, std::ios::binary | std::ios::trunc);
  if (!output) TP_THROW(DataError, "trace", path.string(), ": cannot open for writing; check the directory exists");
  write_trace(output, trace);
  output.flush();
  if (!output) TP_THROW(DataError, "trace", path.string(), ": write failed (disk full?)");
}

}  // namespace tp::memory

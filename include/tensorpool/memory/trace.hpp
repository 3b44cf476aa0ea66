// SPDX-License-Identifier: Apache-2.0
#pragma once
// Allocation traces: the RMM-compatible CSV that the LoggingAdaptor writes and that the replay tool, the
// trace generators and the offline planner read.
//
//   Thread,Time,Action,Pointer,Size,Stream
//   0,1520,allocate,0x7f0000000000,4096,0x0
//   0,2950,free,0x7f0000000000,4096,0x0
//
// Columns: Thread = unsigned integer id; Time = see below; Action = allocate | free | allocate failure
// ("deallocate" is read as free); Pointer = hex address (0x prefix optional; 0x0 on allocate failure);
// Size = bytes, decimal, > 0; Stream = unsigned integer, hex with 0x or decimal.
// Time: written as integer nanoseconds since the start of the trace. Read as any of: integer nanoseconds
// ("1520"), decimal seconds ("1634567890.123456"), or RMM's "HH:MM:SS.ffffff" (nanoseconds since midnight).
// The order of lines is the order of events (the interleaving of threads); times are informational.
//
// A Trace is always valid: every free names a pointer that is live (allocated earlier, not yet freed) with
// the size it was allocated with; no pointer is allocated twice while live. Construction checks this and
// throws tp::DataError naming the source and the line ("file.csv:17").

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tp::memory {

enum class TraceAction : std::uint8_t { allocate, free, allocate_failure };

// "allocate", "free", "allocate failure".
std::string_view to_string(TraceAction action) noexcept;

struct TraceEvent {
  std::uint64_t thread = 0;
  std::int64_t time_ns = 0;
  TraceAction action = TraceAction::allocate;
  std::uintptr_t pointer = 0;
  std::size_t size = 0;
  std::uint64_t stream = 0;

  friend bool operator==(const TraceEvent&, const TraceEvent&) = default;
};

inline constexpr std::size_t kNoEvent = std::numeric_limits<std::size_t>::max();
inline constexpr std::string_view kTraceHeader = "Thread,Time,Action,Pointer,Size,Stream";

// A validated sequence of events with each allocate linked to its free.
// Invariants: partner(i) of an allocate is the index of its free (> i) or kNoEvent when it is never freed;
// partner(i) of a free is the index of its allocate (< i) with the same pointer and size;
// partner(i) of an allocate failure is kNoEvent.
class Trace {
 public:
  Trace() = default;
  // Validates and links. `line_numbers[i]` is the source line of events[i] for error messages; when empty,
  // event i is reported as line i + 2 (the line write_trace puts it on, after the header).
  Trace(std::string source, std::vector<TraceEvent> events, std::span<const std::size_t> line_numbers = {});

  const std::string& source() const noexcept { return source_; }
  const std::vector<TraceEvent>& events() const noexcept { return events_; }
  std::size_t size() const noexcept { return events_.size(); }
  bool empty() const noexcept { return events_.empty(); }
  std::size_t partner(std::size_t index) const noexcept { return partners_[index]; }
  // The source line of event `index` (from the constructor's line_numbers, else index + 2), for messages.
  std::size_t line(std::size_t index) const noexcept {
    return index < line_numbers_.size() ? line_numbers_[index] : index + 2;
  }

  // Distinct thread ids in order of first appearance.
  const std::vector<std::uint64_t>& threads() const noexcept { return threads_; }
  // Max over time of the sum of sizes of live allocations: the lower bound on any allocator's footprint.
  std::size_t peak_live_bytes() const noexcept { return peak_live_bytes_; }
  std::size_t allocation_count() const noexcept { return allocation_count_; }
  std::size_t free_count() const noexcept { return free_count_; }
  std::size_t failure_count() const noexcept { return failure_count_; }

 private:
  std::string source_;
  std::vector<TraceEvent> events_;
  std::vector<std::size_t> partners_;
  std::vector<std::size_t> line_numbers_;  // the source lines of the first events (all, when read from a file)
  std::vector<std::uint64_t> threads_;
  std::size_t peak_live_bytes_ = 0;
  std::size_t allocation_count_ = 0;
  std::size_t free_count_ = 0;
  std::size_t failure_count_ = 0;
};

// Reads a whole CSV trace. Throws tp::DataError naming `source_name` and the line for: a missing or wrong
// header, a wrong column count, a bad number, thread, pointer or action, a zero size, a free of a pointer
// that is not live (unknown or double free), a free whose size differs from the allocation's, and an
// allocation of a pointer that is still live. Blank lines are skipped; a trailing '\r' is ignored.
[[nodiscard]] Trace read_trace(std::istream& input, std::string_view source_name);
// Opens `path` and reads it; tp::DataError when it cannot be opened.
[[nodiscard]] Trace read_trace_file(const std::filesystem::path& path);

// One CSV line without the newline, e.g. "0,1520,allocate,0x7f0000000000,4096,0x0".
[[nodiscard]] std::string format_trace_line(const TraceEvent& event);
// Header, then one line per event.
void write_trace(std::ostream& output, const Trace& trace);
// Throws tp::DataError when the file cannot be written.
void write_trace_file(const std::filesystem::path& path, const Trace& trace);

}  // namespace tp::memory

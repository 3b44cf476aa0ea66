// SPDX-License-Identifier: Apache-2.0
#pragma once
// Exporters of a MemorySnapshot: each a pure function of the snapshot (docs/profiling.md describes every
// format and its schema).
//   snapshot_json     the snapshot as JSON (schema version MemorySnapshot::kSchemaVersion)
//   chrome_trace_json Chrome Trace Event JSON: per device a counter track (in use, reserved) and an async
//                     slice per tensor lifetime; opens in Perfetto and chrome://tracing
//   recorded_trace    the recorded events as an RMM allocation trace (trace.hpp), which `tensorpool replay`
//                     reads; frees of allocations older than the retained events are left out so it validates
//   html_report       one self-contained HTML page (viewer JS/CSS embedded at build time, the snapshot inline)
//   summary_table     the memory_summary() text table of one device

#include <filesystem>
#include <optional>
#include <string>

#include "tensorpool/memory/trace.hpp"
#include "tensorpool/profile/memory_snapshot.hpp"

namespace tp::profile {

[[nodiscard]] std::string snapshot_json(const MemorySnapshot& snapshot, int indent = -1);
[[nodiscard]] std::string chrome_trace_json(const MemorySnapshot& snapshot);
// Only `device`'s events (what replaying reproduces that device's peak from), or every recorded device's in
// time order (replayed on one device, their sum). Thread = the event's thread id.
[[nodiscard]] memory::Trace recorded_trace(const MemorySnapshot& snapshot,
                                           const std::optional<std::string>& device = std::nullopt);
[[nodiscard]] std::string html_report(const MemorySnapshot& snapshot);
[[nodiscard]] std::string summary_table(const DeviceSnapshot& device);

// Writes `text` to `path` (tp::DataError naming the path when it cannot).
void write_text_file(const std::filesystem::path& path, const std::string& text);

}  // namespace tp::profile

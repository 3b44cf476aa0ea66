// SPDX-License-Identifier: Apache-2.0
// summary_table(): the memory_summary() text table, PyTorch's memory_summary in spirit: one row per figure,
// columns current | peak | total allocated | total freed ("-" where a figure has no such column).
#include <fmt/format.h>

#include "tensorpool/core/units.hpp"
#include "tensorpool/profile/exporters.hpp"

namespace tp::profile {

std::string summary_table(const DeviceSnapshot& device) {
  const memory::MemoryStats& stats = device.stats;
  std::string text = fmt::format("Memory summary of {} (allocator {}, {}, limit {}{})\n", device.device,
                                 device.allocator, device.policy, format_bytes(device.limit_bytes),
                                 device.recording ? "" : "; not recorded: totals of bytes need a MemoryProfiler");
  auto row = [&text](const std::string& name, const std::string& current, const std::string& peak,
                     const std::string& allocated, const std::string& freed) {
    text += fmt::format("  {:<15} {:>14} {:>14} {:>16} {:>14}\n", name, current, peak, allocated, freed);
  };
  const std::string none = "-";
  row("", "current", "peak", "total allocated", "total freed");
  row("in use", format_bytes(stats.bytes_in_use), format_bytes(stats.peak_bytes_in_use),
      device.recording ? format_bytes(device.total_allocated_bytes) : none,
      device.recording ? format_bytes(device.total_freed_bytes) : none);
  row("reserved", format_bytes(stats.bytes_reserved), format_bytes(stats.peak_bytes_reserved),
      std::to_string(stats.upstream_allocs) + " calls", std::to_string(stats.upstream_frees) + " calls");
  row("requested", format_bytes(stats.bytes_requested), format_bytes(stats.peak_bytes_requested), none, none);
  const memory::Fragmentation fragmentation = stats.fragmentation_detail();
  row("largest free", format_bytes(fragmentation.largest_free_block), none, none, none);
  row("external frag.", fmt::format("{:.1f}%", 100.0 * fragmentation.external), none, none, none);
  row("internal frag.", format_bytes(fragmentation.internal_bytes.value_or(0)), none, none, none);
  const std::uint64_t live = stats.num_allocs >= stats.num_frees ? stats.num_allocs - stats.num_frees : 0;
  row("allocs", std::to_string(live), none, std::to_string(stats.num_allocs), std::to_string(stats.num_frees));
  row("OOMs", none, none, std::to_string(stats.num_ooms), none);
  row("retries", none, none, std::to_string(stats.num_retries), none);
  row("compactions", none, none, std::to_string(stats.num_compactions), format_bytes(stats.bytes_compacted) + " moved");
  if (device.planned_peak_bytes) {
    text += fmt::format("  planned peak {} (static plan); measured peak requested {}\n",
                        format_bytes(*device.planned_peak_bytes), format_bytes(stats.peak_bytes_requested));
  }
  if (!device.peak.by_kind.empty()) {
    text += "  at the peak, by kind:";
    for (const BreakdownRow& kind : device.peak.by_kind) {
      text += fmt::format(" {} {} ({} tensors);", kind.key, format_bytes(kind.allocated_bytes), kind.tensors);
    }
    text.back() = '\n';
  }
  return text;
}

}  // namespace tp::profile

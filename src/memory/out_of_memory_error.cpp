// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/out_of_memory_error.hpp"

#include <sstream>

#include "tensorpool/core/units.hpp"

namespace tp {

std::size_t OutOfMemoryReport::free_bytes() const noexcept {
  const std::size_t ceiling = limit_bytes.has_value() ? *limit_bytes : reserved_bytes;
  return ceiling > in_use_bytes ? ceiling - in_use_bytes : 0;
}

std::size_t OutOfMemoryReport::reserved_free_bytes() const noexcept { return fragmentation().free_bytes; }

memory::Fragmentation OutOfMemoryReport::fragmentation() const noexcept {
  return memory::measure_fragmentation(reserved_bytes, in_use_bytes, largest_free_block, requested_in_use_bytes);
}

bool OutOfMemoryReport::is_fragmentation() const noexcept {
  const memory::Fragmentation pieces = fragmentation();
  const std::size_t unreserved =
      limit_bytes.has_value() && *limit_bytes > reserved_bytes ? *limit_bytes - reserved_bytes : 0;
  return free_bytes() >= rounded_bytes && pieces.free_bytes > 0 && pieces.largest_free_block < rounded_bytes &&
         unreserved < rounded_bytes;
}

bool OutOfMemoryReport::exceeds_limit() const noexcept {
  return limit_bytes.has_value() && rounded_bytes > *limit_bytes;
}

OutOfMemoryReport OutOfMemoryReport::for_request(std::string allocator, std::size_t requested, std::size_t rounded,
                                                 const memory::AllocationTag& tag, std::optional<std::size_t> limit,
                                                 std::size_t in_use, std::size_t reserved) {
  OutOfMemoryReport report;
  report.allocator = std::move(allocator);
  report.requested_bytes = requested;
  report.rounded_bytes = rounded;
  report.request_tag = tag;
  report.limit_bytes = limit;
  report.in_use_bytes = in_use;
  report.reserved_bytes = reserved;
  return report;
}

OutOfMemoryError::OutOfMemoryError(OutOfMemoryReport report) : report_(std::move(report)), message_(render(report_)) {}

std::string OutOfMemoryError::render(const OutOfMemoryReport& report) {
  std::ostringstream text;

  text << "[memory] out of memory";
  if (!report.device.empty()) text << " on " << report.device;
  if (!report.allocator.empty()) text << " (allocator " << report.allocator << ")";
  text << ": tried to allocate " << format_bytes(report.requested_bytes);
  if (report.rounded_bytes != report.requested_bytes) text << " (" << format_bytes(report.rounded_bytes) << " rounded)";
  if (!report.request_tag.empty()) text << " for " << report.request_tag.describe();
  text << ".\n  limit " << (report.limit_bytes ? format_bytes(*report.limit_bytes) : std::string("none")) << ", in use "
       << format_bytes(report.in_use_bytes) << ", reserved " << format_bytes(report.reserved_bytes) << ", free "
       << format_bytes(report.free_bytes()) << ".\n  " << memory::describe(report.fragmentation()) << ".";
  if (!report.detail.empty()) text << "\n  " << report.detail;
  if (report.compaction.has_value()) {
    const memory::CompactionResult& compaction = *report.compaction;
    if (compaction.ran) {
      text << "\n  Compaction ran before this request: it moved " << compaction.blocks_moved << " block(s) ("
           << format_bytes(compaction.bytes_copied) << " copied, " << format_bytes(compaction.bytes_remapped)
           << " remapped) and freed " << compaction.granules_freed << " granule(s) ("
           << format_bytes(compaction.granules_freed * compaction.granularity) << "; committed "
           << format_bytes(compaction.committed_before) << " -> " << format_bytes(compaction.committed_after)
           << "), not enough for the request.";
    } else {
      text << "\n  Compaction was asked for but cannot run on this allocator (it shares physical granules;"
           << " set share_granules off to compact).";
    }
  }

  if (report.exceeds_limit()) {
    // Variables do not depend on the batch: a smaller batch only shrinks the step's tensors.
    const memory::AllocationKind kind = report.request_tag.kind;
    const bool persistent = kind == memory::AllocationKind::parameter ||
                            kind == memory::AllocationKind::optimizer_state || kind == memory::AllocationKind::gradient;
    text << "\n  Cause: the request alone (" << format_bytes(report.rounded_bytes) << ") exceeds the limit ("
         << format_bytes(*report.limit_bytes) << ")"
         << (report.in_use_bytes == 0 ? "; nothing else is in use, so freeing memory cannot help."
                                      : ", whatever else is freed.")
         << " Make the tensor smaller (" << (persistent ? "a smaller layer" : "a smaller batch or layer")
         << ", or split it over devices) or raise the limit"
         << " (MemoryConfig::limit_bytes / fraction, TP_MEMORY_FRACTION).";
  } else if (report.is_fragmentation()) {
    const std::size_t reserved_free = report.reserved_free_bytes();
    const std::size_t unreserved = report.free_bytes() > reserved_free ? report.free_bytes() - reserved_free : 0;
    text << "\n  Cause: fragmentation. " << format_bytes(report.free_bytes())
         << " are free in total but no single block holds the request (the largest reserved free block is "
         << format_bytes(report.fragmentation().largest_free_block);
    if (unreserved > 0) text << "; " << format_bytes(unreserved) << " under the limit is not reserved yet";
    text << "). Use the expandable allocator"
         << " (TP_ALLOCATOR=expandable), which maps pages on demand so free space needs no contiguous hole, or"
         << " allocate long-lived tensors (parameters, optimizer state) before short-lived ones so they do not"
         << " pin holes between activations.";
  } else if (report.in_use_bytes == 0) {
    text << "\n  Cause: the memory below this allocator refused the request although nothing of this stack is"
         << " in use and it is within the limit: the device's memory is held elsewhere (see above), or the"
         << " limit is larger than what the device can give.";
  } else {
    text << "\n  Cause: real shortage: the request does not fit in the " << format_bytes(report.free_bytes())
         << " the limit leaves beside the " << format_bytes(report.in_use_bytes) << " in use."
         << " Reduce the batch size, free tensors you no longer need, or raise the limit"
         << " (MemoryConfig::limit_bytes / fraction, TP_MEMORY_FRACTION).";
  }
  if (!report.suggestion.empty()) text << "\n  Suggested fix: " << report.suggestion;
  if (!report.largest_live.empty()) {
    text << "\n  Largest live allocations:";
    for (const LiveAllocation& live : report.largest_live) {
      text << "\n    " << format_bytes(live.bytes) << "  " << live.tag.describe();
    }
  }
  return text.str();
}

}  // namespace tp

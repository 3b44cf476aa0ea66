// SPDX-License-Identifier: Apache-2.0
#pragma once
// tp::OutOfMemoryError: thrown when a memory stack cannot serve a request. It is a std::bad_alloc, so code
// that handles allocation failure generically still works, and it carries a structured report that the
// layers of the stack fill on the way up (the allocator: sizes and fragmentation; the tracking adaptor: the
// largest live allocations; the stack: the device name). what() is rebuilt from the report and tells a
// fragmentation failure apart from a real shortage, with the remedy that fits.

#include <cstddef>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "tensorpool/memory/allocation_tag.hpp"
#include "tensorpool/memory/compaction.hpp"
#include "tensorpool/memory/fragmentation.hpp"

namespace tp {

struct LiveAllocation {
  std::size_t bytes = 0;
  memory::AllocationTag tag;
};

struct OutOfMemoryReport {
  std::string device;                      // "sim:0"; empty when the stack has no device
  std::string allocator;                   // resource that refused, e.g. "bfc"
  std::size_t requested_bytes = 0;         // as asked by the caller
  std::size_t rounded_bytes = 0;           // after the allocator's rounding
  memory::AllocationTag request_tag;       // what the failed request was for
  std::optional<std::size_t> limit_bytes;  // hard wall, if any
  std::size_t in_use_bytes = 0;
  std::size_t reserved_bytes = 0;
  std::size_t largest_free_block = 0;  // largest contiguous piece of reserved - in use (fragmentation.hpp)
  // The outstanding bytes as callers asked for them (before rounding): filled by the stack's
  // StatisticsAdaptor, unset when the refusing layer is used alone.
  std::optional<std::size_t> requested_in_use_bytes;
  std::vector<LiveAllocation> largest_live;  // biggest outstanding allocations, largest first
  // The compaction that ran after the last allocation the refusing layer served, before this request (the
  // caller compacted and retried): what it moved and gave back, and that it was not enough. Unset otherwise.
  std::optional<memory::CompactionResult> compaction;
  std::string detail;      // extra words from the refusing layer (e.g. the OS error)
  std::string suggestion;  // the concrete fix, from a layer that knows the workload (e.g. a
                           // batch size that fits according to the static plan); may be empty

  // What every refusing layer fills: who refused, the request, and its counters at that moment.
  [[nodiscard]] static OutOfMemoryReport for_request(std::string allocator, std::size_t requested, std::size_t rounded,
                                                     const memory::AllocationTag& tag, std::optional<std::size_t> limit,
                                                     std::size_t in_use, std::size_t reserved);

  // Bytes that could still hold data: limit - in use, or reserved - in use without a limit.
  [[nodiscard]] std::size_t free_bytes() const noexcept;
  // The part of free_bytes() the allocator has reserved (reserved - in use): the only part that can be in
  // pieces; what is not reserved yet is one block to a growing allocator.
  [[nodiscard]] std::size_t reserved_free_bytes() const noexcept;
  // Fragmentation as MemoryStats reports it for the same state (fragmentation.hpp): external over
  // reserved_free_bytes(), 0 when nothing reserved is free, so an allocator that has reserved nothing never
  // reads as fragmented; internal when requested_in_use_bytes is known.
  [[nodiscard]] memory::Fragmentation fragmentation() const noexcept;
  // True when enough memory is free in total but no single block holds the request: no reserved free block
  // is large enough, some reserved memory is free (in pieces), and what the limit leaves unreserved is
  // smaller than the request too (otherwise a growing allocator refused because the memory below did).
  [[nodiscard]] bool is_fragmentation() const noexcept;
  // True when the request alone (after rounding) is larger than the limit: nothing freed would make it fit.
  [[nodiscard]] bool exceeds_limit() const noexcept;
};

class OutOfMemoryError : public std::bad_alloc {
 public:
  explicit OutOfMemoryError(OutOfMemoryReport report);

  const OutOfMemoryReport& report() const noexcept { return report_; }
  // Lets upper layers add what they know (device, live tags); what() follows.
  template <typename Mutator>
  void amend(Mutator&& mutate) {
    mutate(report_);
    message_ = render(report_);
  }
  const char* what() const noexcept override { return message_.c_str(); }

  [[nodiscard]] static std::string render(const OutOfMemoryReport& report);

 private:
  OutOfMemoryReport report_;
  std::string message_;
};

}  // namespace tp

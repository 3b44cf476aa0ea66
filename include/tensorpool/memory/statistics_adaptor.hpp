// SPDX-License-Identifier: Apache-2.0
#pragma once
// StatisticsAdaptor: owns the caller-facing counters of a stack. It counts what callers asked for
// (bytes_requested and its peak, num_allocs, num_frees, largest_alloc) and every tp::OutOfMemoryError that
// passes through it on the way to the caller (num_ooms; the error is rethrown unchanged). Everything that
// depends on rounding or on the source (bytes_in_use, bytes_reserved and their peaks, largest_free_block,
// num_retries, upstream_allocs/frees, bytes_limit) comes from upstream.stats(), since only the allocators
// below know it.
//
// Invariant (when no call is in flight): bytes_requested_ == sum of `bytes` of allocations served and not yet
// freed <= peak_bytes_requested_; num_frees_ <= num_allocs_.
// Thread safety: lock-free. Each counter is a relaxed atomic (a peak or a maximum is raised by a
// compare-exchange only when exceeded), so the counting costs an allocate/free pair no lock; stats() reads each
// counter exactly, though counters read while other threads allocate need not be from one instant.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tensorpool/memory/resource_adaptor.hpp"

namespace tp::memory {

class StatisticsAdaptor final : public ResourceAdaptor {
 public:
  explicit StatisticsAdaptor(std::unique_ptr<MemoryResource> upstream, std::string name = "statistics");
  explicit StatisticsAdaptor(MemoryResource& upstream, std::string name = "statistics");

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;

  std::atomic<std::size_t> bytes_requested_{0};
  std::atomic<std::size_t> peak_bytes_requested_{0};
  std::atomic<std::uint64_t> num_allocs_{0};
  std::atomic<std::uint64_t> num_frees_{0};
  std::atomic<std::size_t> largest_alloc_{0};
  std::atomic<std::uint64_t> num_ooms_{0};
};

}  // namespace tp::memory

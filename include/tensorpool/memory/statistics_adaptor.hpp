// SPDX-License-Identifier: Apache-2.0
#pragma once
// StatisticsAdaptor: owns the caller-facing counters of a stack. It counts what callers asked for
// (bytes_requested and its peak, num_allocs, num_frees, largest_alloc) and every tp::OutOfMemoryError that
// passes through it on the way to the caller (num_ooms; the error is rethrown unchanged). Everything that
// depends on rounding or on the source (bytes_in_use, bytes_reserved and their peaks, largest_free_block,
// num_retries, upstream_allocs/frees, bytes_limit) comes from upstream.stats(), since only the allocators
// below know it.
//
// Invariant: counters_.bytes_requested == sum of `bytes` of allocations served and not yet freed
// <= counters_.peak_bytes_requested; num_frees <= num_allocs.
// Thread safety: one mutex guards counters_; it is never held while calling the upstream.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "tensorpool/memory/resource_adaptor.hpp"

namespace tp::memory {

class StatisticsAdaptor final : public ResourceAdaptor {
 public:
  explicit StatisticsAdaptor(std::unique_ptr<MemoryResource> upstream, std::string name = "statistics");
  explicit StatisticsAdaptor(MemoryResource& upstream, std::string name = "statistics");

 private:
  struct Counters {
    std::size_t bytes_requested = 0;
    std::size_t peak_bytes_requested = 0;
    std::uint64_t num_allocs = 0;
    std::uint64_t num_frees = 0;
    std::size_t largest_alloc = 0;
    std::uint64_t num_ooms = 0;
  };

  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;

  mutable std::mutex mutex_;  // guards counters_
  Counters counters_;
};

}  // namespace tp::memory

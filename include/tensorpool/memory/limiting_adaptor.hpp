// SPDX-License-Identifier: Apache-2.0
#pragma once
// LimitingAdaptor: a hard wall on the bytes outstanding through it, each request counted as the upstream
// really hands it out (rounded up to upstream().allocation_granularity(), e.g. a page for a device that maps
// pages), so that many tiny requests cannot exceed the budget in real memory. A request that would take the
// outstanding total past the limit is refused with a tp::OutOfMemoryError carrying a full report (the limit,
// what is outstanding, the upstream's reservation) and counted in num_ooms; nothing reaches the upstream
// then. Everything else passes through unchanged, tag included. stats() and the report give as the largest
// free block only what the upstream holds free (none for a source: its headroom is no free block).
//
// Invariant: outstanding_ == sum of charged(bytes) of allocations served and not yet freed <= limit_bytes_.
// Thread safety: the outstanding total is claimed with a compare-and-swap before the upstream is called and
// given back if the upstream throws, so concurrent requests never overshoot the limit.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tensorpool/memory/resource_adaptor.hpp"

namespace tp::memory {

class LimitingAdaptor final : public ResourceAdaptor {
 public:
  // Throws tp::InvalidArgument for a null upstream or limit_bytes == 0.
  LimitingAdaptor(std::unique_ptr<MemoryResource> upstream, std::size_t limit_bytes, std::string name = "limiting");
  LimitingAdaptor(MemoryResource& upstream, std::size_t limit_bytes, std::string name = "limiting");

  [[nodiscard]] std::size_t limit_bytes() const noexcept { return limit_bytes_; }
  [[nodiscard]] std::size_t outstanding_bytes() const noexcept { return outstanding_.load(std::memory_order_relaxed); }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  MemoryStats do_stats() const override;
  std::size_t charged(std::size_t bytes) const noexcept;
  [[noreturn]] void refuse(std::size_t requested, std::size_t charged_bytes, std::size_t outstanding,
                           const AllocationTag& tag);

  const std::size_t limit_bytes_;
  std::atomic<std::size_t> outstanding_{0};
  std::atomic<std::uint64_t> num_ooms_{0};  // requests this adaptor refused
};

}  // namespace tp::memory

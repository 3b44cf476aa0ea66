// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/statistics_adaptor.hpp"

#include <utility>

#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

// Raises `maximum` to `value` unless it is already at least that; a load alone when it is.
void raise_to(std::atomic<std::size_t>& maximum, std::size_t value) noexcept {
  std::size_t current = maximum.load(std::memory_order_relaxed);
  while (current < value && !maximum.compare_exchange_weak(current, value, std::memory_order_relaxed)) {}
}

}  // namespace

StatisticsAdaptor::StatisticsAdaptor(std::unique_ptr<MemoryResource> upstream, std::string name)
    : ResourceAdaptor(std::move(upstream), std::move(name)) {}

StatisticsAdaptor::StatisticsAdaptor(MemoryResource& upstream, std::string name)
    : ResourceAdaptor(upstream, std::move(name)) {}

void* StatisticsAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  void* ptr = nullptr;
  try {
    ptr = upstream_allocate(bytes, alignment, tag);
  } catch (OutOfMemoryError& error) {
    num_ooms_.fetch_add(1, std::memory_order_relaxed);
    // The refusing layer counts in-use bytes after rounding, this one as asked: with both, the report gives
    // the bytes lost to rounding (internal fragmentation).
    const std::size_t requested_in_use = bytes_requested_.load(std::memory_order_relaxed);
    error.amend([requested_in_use](OutOfMemoryReport& report) { report.requested_in_use_bytes = requested_in_use; });
    throw;
  }
  const std::size_t requested = bytes_requested_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  raise_to(peak_bytes_requested_, requested);
  raise_to(largest_alloc_, bytes);
  num_allocs_.fetch_add(1, std::memory_order_relaxed);
  return ptr;
}

void StatisticsAdaptor::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  // Counted before the block goes back: bytes_requested_ never counts a block twice, so it cannot wrap.
  bytes_requested_.fetch_sub(bytes, std::memory_order_relaxed);
  num_frees_.fetch_add(1, std::memory_order_relaxed);
  upstream_deallocate(ptr, bytes);
}

MemoryStats StatisticsAdaptor::do_stats() const {
  MemoryStats stats = upstream().stats();
  stats.bytes_requested = bytes_requested_.load(std::memory_order_relaxed);
  stats.peak_bytes_requested = peak_bytes_requested_.load(std::memory_order_relaxed);
  stats.num_allocs = num_allocs_.load(std::memory_order_relaxed);
  stats.num_frees = num_frees_.load(std::memory_order_relaxed);
  stats.largest_alloc = largest_alloc_.load(std::memory_order_relaxed);
  stats.num_ooms = num_ooms_.load(std::memory_order_relaxed);
  return stats;
}

void StatisticsAdaptor::do_reset_peak() {
  upstream().reset_peak();
  peak_bytes_requested_.store(bytes_requested_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace tp::memory

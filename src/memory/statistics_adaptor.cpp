// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/statistics_adaptor.hpp"

#include <algorithm>
#include <utility>

#include "memory/atomic_max.hpp"
#include "memory/thread_index.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

using detail::kNoThreadIndex;
using detail::raise_to;
using detail::tls_thread_index;
static_assert(StatisticsAdaptor::kShards == detail::kThreadIndices,
              "a shard per thread index, and the shared one for the threads beyond");

// Adds to a counter only this thread writes: a plain load and store, no locked instruction.
void add_owned(std::atomic<std::uint64_t>& counter, std::uint64_t value) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + value, std::memory_order_relaxed);
}

}  // namespace

StatisticsAdaptor::StatisticsAdaptor(std::unique_ptr<MemoryResource> upstream, std::string name, RequestCounts counts)
    : ResourceAdaptor(std::move(upstream), std::move(name)), counts_(counts) {}

StatisticsAdaptor::StatisticsAdaptor(MemoryResource& upstream, std::string name, RequestCounts counts)
    : ResourceAdaptor(upstream, std::move(name)), counts_(counts) {}

// The per-call path: this thread's own shard, added to without a locked instruction; the first count of a
// thread, and the counts of a thread without an index, go through count_slowly.
inline void StatisticsAdaptor::count_allocation(std::size_t bytes) noexcept {
  const std::size_t index = tls_thread_index;
  if (index >= kShards) [[unlikely]] {
    count_slowly(bytes, 0);
    return;
  }
  Shard& counts = shards_[index];
  add_owned(counts.allocs, 1);
  if (bytes > counts.largest_alloc.load(std::memory_order_relaxed)) {
    counts.largest_alloc.store(bytes, std::memory_order_relaxed);
  }
}

inline void StatisticsAdaptor::count_free() noexcept {
  const std::size_t index = tls_thread_index;
  if (index >= kShards) [[unlikely]] {
    count_slowly(0, 1);
    return;
  }
  add_owned(shards_[index].frees, 1);
}

void StatisticsAdaptor::count_slowly(std::size_t allocated_bytes, std::uint64_t frees) noexcept {
  if (tls_thread_index == kNoThreadIndex && detail::take_thread_index() < kShards) {
    if (allocated_bytes != 0) count_allocation(allocated_bytes);
    if (frees != 0) count_free();
    return;
  }
  Shard& shared = shards_[kShards];
  if (allocated_bytes != 0) {
    shared.allocs.fetch_add(1, std::memory_order_relaxed);
    raise_to(shared.largest_alloc, allocated_bytes);
  }
  shared.frees.fetch_add(frees, std::memory_order_relaxed);
}

void* StatisticsAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  void* ptr = nullptr;
  try {
    ptr = upstream_allocate(bytes, alignment, tag);
  } catch (OutOfMemoryError& error) {
    num_ooms_.fetch_add(1, std::memory_order_relaxed);
    // The refusing layer counts in-use bytes after rounding, this one as asked: with both, the report gives
    // the bytes lost to rounding (internal fragmentation).
    const std::size_t requested_in_use = counts_ == RequestCounts::own
                                             ? bytes_requested_.load(std::memory_order_relaxed)
                                             : upstream().stats().bytes_requested;
    error.amend([requested_in_use](OutOfMemoryReport& report) { report.requested_in_use_bytes = requested_in_use; });
    throw;
  }
  if (counts_ == RequestCounts::own) {
    const std::size_t requested = bytes_requested_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    raise_to(peak_bytes_requested_, requested);
    count_allocation(bytes);
  }
  return ptr;
}

void StatisticsAdaptor::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  // Counted before the block goes back: bytes_requested_ never counts a block twice, so it cannot wrap.
  if (counts_ == RequestCounts::own) {
    bytes_requested_.fetch_sub(bytes, std::memory_order_relaxed);
    count_free();
  }
  upstream_deallocate(ptr, bytes);
}

MemoryStats StatisticsAdaptor::do_stats() const {
  MemoryStats stats = upstream().stats();
  stats.num_ooms = num_ooms_.load(std::memory_order_relaxed);
  if (counts_ == RequestCounts::upstream) return stats;
  stats.bytes_requested = bytes_requested_.load(std::memory_order_relaxed);
  stats.peak_bytes_requested = peak_bytes_requested_.load(std::memory_order_relaxed);
  stats.num_allocs = 0;
  stats.num_frees = 0;
  stats.largest_alloc = 0;
  for (const Shard& counts : shards_) {
    stats.num_allocs += counts.allocs.load(std::memory_order_relaxed);
    stats.num_frees += counts.frees.load(std::memory_order_relaxed);
    stats.largest_alloc = std::max(stats.largest_alloc, counts.largest_alloc.load(std::memory_order_relaxed));
  }
  return stats;
}

void StatisticsAdaptor::do_reset_peak() {
  upstream().reset_peak();
  peak_bytes_requested_.store(bytes_requested_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/statistics_adaptor.hpp"

#include <algorithm>
#include <utility>

#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {

StatisticsAdaptor::StatisticsAdaptor(std::unique_ptr<MemoryResource> upstream, std::string name)
    : ResourceAdaptor(std::move(upstream), std::move(name)) {}

StatisticsAdaptor::StatisticsAdaptor(MemoryResource& upstream, std::string name)
    : ResourceAdaptor(upstream, std::move(name)) {}

void* StatisticsAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  void* ptr = nullptr;
  try {
    ptr = upstream().allocate(bytes, alignment, tag);
  } catch (const OutOfMemoryError&) {
    const std::lock_guard lock(mutex_);
    ++counters_.num_ooms;
    throw;
  }
  const std::lock_guard lock(mutex_);
  counters_.bytes_requested += bytes;
  counters_.peak_bytes_requested = std::max(counters_.peak_bytes_requested, counters_.bytes_requested);
  counters_.largest_alloc = std::max(counters_.largest_alloc, bytes);
  ++counters_.num_allocs;
  return ptr;
}

void StatisticsAdaptor::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  upstream().deallocate(ptr, bytes);
  const std::lock_guard lock(mutex_);
  counters_.bytes_requested -= bytes;
  ++counters_.num_frees;
}

MemoryStats StatisticsAdaptor::do_stats() const {
  MemoryStats stats = upstream().stats();
  const std::lock_guard lock(mutex_);
  stats.bytes_requested = counters_.bytes_requested;
  stats.peak_bytes_requested = counters_.peak_bytes_requested;
  stats.num_allocs = counters_.num_allocs;
  stats.num_frees = counters_.num_frees;
  stats.largest_alloc = counters_.largest_alloc;
  stats.num_ooms = counters_.num_ooms;
  return stats;
}

void StatisticsAdaptor::do_reset_peak() {
  upstream().reset_peak();
  const std::lock_guard lock(mutex_);
  counters_.peak_bytes_requested = counters_.bytes_requested;
}

}  // namespace tp::memory

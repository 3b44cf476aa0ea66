// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/limiting_adaptor.hpp"

#include <algorithm>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

std::size_t checked_limit(std::size_t limit_bytes, const std::string& name) {
  if (limit_bytes == 0) {
    TP_THROW(InvalidArgument, "memory", name, ": limit_bytes = 0 would refuse every request; pass a positive limit");
  }
  return limit_bytes;
}

}  // namespace

LimitingAdaptor::LimitingAdaptor(std::unique_ptr<MemoryResource> upstream, std::size_t limit_bytes, std::string name)
    : ResourceAdaptor(std::move(upstream), std::move(name)), limit_bytes_(checked_limit(limit_bytes, this->name())) {}

LimitingAdaptor::LimitingAdaptor(MemoryResource& upstream, std::size_t limit_bytes, std::string name)
    : ResourceAdaptor(upstream, std::move(name)), limit_bytes_(checked_limit(limit_bytes, this->name())) {}

// What a request really takes from the upstream: the budget bounds that, not the bytes asked for.
std::size_t LimitingAdaptor::charged(std::size_t bytes) const noexcept {
  const std::size_t unit = upstream().allocation_granularity();
  return unit <= 1 ? bytes : (bytes + unit - 1) / unit * unit;
}

void* LimitingAdaptor::do_allocate(std::size_t requested, std::size_t alignment, const AllocationTag& tag) {
  const std::size_t bytes = charged(requested);
  std::size_t current = outstanding_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_bytes_ || current > limit_bytes_ - bytes) refuse(requested, bytes, current, tag);
  } while (!outstanding_.compare_exchange_weak(current, current + bytes, std::memory_order_acq_rel,
                                               std::memory_order_relaxed));
  try {
    return upstream_allocate(requested, alignment, tag);
  } catch (...) {
    outstanding_.fetch_sub(bytes, std::memory_order_acq_rel);
    throw;
  }
}

void LimitingAdaptor::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  upstream_deallocate(ptr, bytes);
  outstanding_.fetch_sub(charged(bytes), std::memory_order_acq_rel);
}

MemoryStats LimitingAdaptor::do_stats() const {
  MemoryStats stats = upstream().stats();
  stats.bytes_limit = stats.bytes_limit ? std::min(*stats.bytes_limit, limit_bytes_) : limit_bytes_;
  stats.num_ooms += num_ooms_.load(std::memory_order_relaxed);
  // A source reports what it could still give as its largest free block; the stack holds none of that, so
  // only the upstream's own free bytes count (fragmentation.hpp).
  stats.largest_free_block = std::min(stats.largest_free_block, stats.free_bytes());
  return stats;
}

void LimitingAdaptor::refuse(std::size_t requested, std::size_t bytes, std::size_t outstanding,
                             const AllocationTag& tag) {
  num_ooms_.fetch_add(1, std::memory_order_relaxed);
  const MemoryStats upstream_stats = upstream().stats();
  auto report = OutOfMemoryReport::for_request(name(), requested, bytes, tag, limit_bytes_, outstanding,
                                               upstream_stats.bytes_reserved);
  // The headroom is the limit less what is outstanding (free_bytes()); only what the upstream holds free can
  // be in pieces.
  report.largest_free_block = std::min(upstream_stats.largest_free_block, upstream_stats.free_bytes());
  report.detail = "The limit of " + format_bytes(limit_bytes_) + " counts bytes as the upstream hands them out; " +
                  format_bytes(outstanding) + " are outstanding and " + format_bytes(limit_bytes_ - outstanding) +
                  " remain.";
  throw OutOfMemoryError(std::move(report));
}

}  // namespace tp::memory

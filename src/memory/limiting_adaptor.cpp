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

LimitingAdaptor::LimitingAdaptor(std::unique_ptr<MemoryResource> upstream, std::size_t limit_bytes,
                                 std::string name)
    : ResourceAdaptor(std::move(upstream), std::move(name)), limit_bytes_(checked_limit(limit_bytes, this->name())) {}

LimitingAdaptor::LimitingAdaptor(MemoryResource& upstream, std::size_t limit_bytes, std::string name)
    : ResourceAdaptor(upstream, std::move(name)), limit_bytes_(checked_limit(limit_bytes, this->name())) {}

void* LimitingAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  std::size_t current = outstanding_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_bytes_ || current > limit_bytes_ - bytes) refuse(bytes, current, tag);
  } while (!outstanding_.compare_exchange_weak(current, current + bytes, std::memory_order_acq_rel,
                                               std::memory_order_relaxed));
  try {
    return upstream().allocate(bytes, alignment, tag);
  } catch (...) {
    outstanding_.fetch_sub(bytes, std::memory_order_acq_rel);
    throw;
  }
}

void LimitingAdaptor::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  upstream().deallocate(ptr, bytes);
  outstanding_.fetch_sub(bytes, std::memory_order_acq_rel);
}

MemoryStats LimitingAdaptor::do_stats() const {
  MemoryStats stats = upstream().stats();
  stats.bytes_limit = stats.bytes_limit ? std::min(*stats.bytes_limit, limit_bytes_) : limit_bytes_;
  stats.num_ooms += num_ooms_.load(std::memory_order_relaxed);
  return stats;
}

void LimitingAdaptor::refuse(std::size_t bytes, std::size_t outstanding, const AllocationTag& tag) {
  num_ooms_.fetch_add(1, std::memory_order_relaxed);
  const MemoryStats upstream_stats = upstream().stats();
  auto report = OutOfMemoryReport::for_request(name(), bytes, bytes, tag, limit_bytes_, outstanding,
                                              upstream_stats.bytes_reserved);
  // Under a limit counted in requested bytes, any request up to the headroom would pass.
  report.largest_free_block = limit_bytes_ - outstanding;
  report.detail = "The limit of " + format_bytes(limit_bytes_) + " counts requested bytes; " +
                  format_bytes(outstanding) + " are outstanding and " + format_bytes(limit_bytes_ - outstanding) +
                  " remain.";
  throw OutOfMemoryError(std::move(report));
}

}  // namespace tp::memory

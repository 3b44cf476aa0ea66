// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/failure_callback_adaptor.hpp"

#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

FailureCallback checked(FailureCallback callback, const std::string& name) {
  if (!callback) {
    TP_THROW(InvalidArgument, "memory", name,
             ": the failure callback is empty; pass a function that frees memory"
             " and returns true when a retry may succeed");
  }
  return callback;
}

}  // namespace

FailureCallbackAdaptor::FailureCallbackAdaptor(std::unique_ptr<MemoryResource> upstream, FailureCallback callback,
                                               std::size_t max_retries, std::string name)
    : ResourceAdaptor(std::move(upstream), std::move(name)),
      callback_(checked(std::move(callback), this->name())),
      max_retries_(max_retries) {}

FailureCallbackAdaptor::FailureCallbackAdaptor(MemoryResource& upstream, FailureCallback callback,
                                               std::size_t max_retries, std::string name)
    : ResourceAdaptor(upstream, std::move(name)),
      callback_(checked(std::move(callback), this->name())),
      max_retries_(max_retries) {}

void* FailureCallbackAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  for (std::size_t retries = 0;; ++retries) {
    try {
      return upstream().allocate(bytes, alignment, tag);
    } catch (OutOfMemoryError& error) {
      const bool spent = retries >= max_retries_;
      if (spent || !callback_(bytes)) {
        if (retries > 0) {
          const std::string line = "The failure callback freed memory " + std::to_string(retries) + " time(s) (" +
                                   std::to_string(max_retries_) + " allowed) and the request still failed.";
          error.amend(
              [&line](OutOfMemoryReport& report) { report.detail += report.detail.empty() ? line : "\n  " + line; });
        }
        throw;
      }
      num_retries_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

MemoryStats FailureCallbackAdaptor::do_stats() const {
  MemoryStats stats = upstream().stats();
  stats.num_retries += num_retries_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace tp::memory

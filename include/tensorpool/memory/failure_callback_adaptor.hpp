// SPDX-License-Identifier: Apache-2.0
#pragma once
// FailureCallbackAdaptor: gives the caller a chance to free memory (drop caches, release a plan's arena)
// when the upstream runs out. On tp::OutOfMemoryError it calls callback(bytes); when the callback returns
// true ("I freed something, try again") the request is retried, at most max_retries times, each retry
// counted in num_retries. When the callback returns false, or the retries are spent, the last error is
// rethrown with a line saying how many retries were made. Other exceptions pass through untouched.
//
// The callback runs on the allocating thread without any lock held here, so it may free memory through
// this very stack; it must be thread-safe when several threads allocate, and it may throw (the exception
// reaches the caller instead of the OutOfMemoryError).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tensorpool/memory/resource_adaptor.hpp"

namespace tp::memory {

using FailureCallback = std::function<bool(std::size_t bytes)>;

class FailureCallbackAdaptor final : public ResourceAdaptor {
 public:
  static constexpr std::size_t kDefaultMaxRetries = 3;

  // Throws tp::InvalidArgument for a null upstream or an empty callback.
  FailureCallbackAdaptor(std::unique_ptr<MemoryResource> upstream, FailureCallback callback,
                         std::size_t max_retries = kDefaultMaxRetries, std::string name = "failure_callback");
  FailureCallbackAdaptor(MemoryResource& upstream, FailureCallback callback,
                         std::size_t max_retries = kDefaultMaxRetries, std::string name = "failure_callback");

  std::size_t max_retries() const noexcept { return max_retries_; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  MemoryStats do_stats() const override;

  // Immutable after construction.
  const FailureCallback callback_;
  const std::size_t max_retries_;
  std::atomic<std::uint64_t> num_retries_{0};
};

}  // namespace tp::memory

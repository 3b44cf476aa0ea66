// SPDX-License-Identifier: Apache-2.0
#pragma once
// CompletionCount: how many of a stream's items have completed, and host threads waiting for a count.
// The completing thread wakes sleepers only once the count reaches the smallest target any of them sleeps
// for, not after every item: a host thread waiting for a step of dozens of kernels is woken once instead of
// taking a core from the stream's thread dozens of times. Thread-safe; the count only grows.

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace tp::device {

class CompletionCount {
 public:
  std::uint64_t value() const {
    std::lock_guard lock(mutex_);
    return completed_;
  }

  // Blocks until at least `target` items have completed.
  void wait_for(std::uint64_t target) {
    std::unique_lock lock(mutex_);
    while (completed_ < target) {
      // Re-registered after every wake-up: add_one() resets wake_at_ when it wakes everybody.
      wake_at_ = std::min(wake_at_, target);
      completed_condition_.wait(lock);
    }
  }

  // One more item completed (its captures already destroyed, so a waiter that sees it also sees them gone).
  void add_one() noexcept {
    bool wake = false;
    {
      std::lock_guard lock(mutex_);
      ++completed_;
      if (completed_ >= wake_at_) {
        wake_at_ = kNobodyWaits;
        wake = true;
      }
    }
    if (wake) completed_condition_.notify_all();
  }

 private:
  static constexpr std::uint64_t kNobodyWaits = ~std::uint64_t{0};

  mutable std::mutex mutex_;
  std::condition_variable completed_condition_;
  std::uint64_t completed_ = 0;
  std::uint64_t wake_at_ = kNobodyWaits;  // the smallest target a waiter sleeps for; kNobodyWaits: none
};

}  // namespace tp::device

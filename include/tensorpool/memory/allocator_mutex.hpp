// SPDX-License-Identifier: Apache-2.0
#pragma once
// AllocatorMutex: the lock an allocator takes on every allocate and free. A three-state futex mutex (Drepper,
// "Futexes are tricky", mutex 2) over std::atomic<int> wait/notify: taking it uncontended is one
// compare-exchange, dropping it one exchange, both inline, where std::mutex goes through pthread_mutex_lock's
// type dispatch in libc on every call. A thread that finds it held waits in the kernel (after the library's
// brief spin) instead of spinning, so contended behaviour is that of a mutex.
//
// States: 0 free; 1 held, no waiter; 2 held, waiters possible. Only unlock from 2 wakes a thread. Not
// recursive, not fair; satisfies Lockable (std::lock_guard, std::unique_lock).

#include <atomic>

namespace tp::memory {

class AllocatorMutex {
 public:
  AllocatorMutex() = default;
  AllocatorMutex(const AllocatorMutex&) = delete;
  AllocatorMutex& operator=(const AllocatorMutex&) = delete;

  void lock() noexcept {
    int expected = 0;
    if (!state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed))
        [[unlikely]] {
      lock_contended(expected);
    }
  }
  [[nodiscard]] bool try_lock() noexcept {
    int expected = 0;
    return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (state_.exchange(0, std::memory_order_release) == 2) [[unlikely]] {
      state_.notify_one();
    }
  }

 private:
  // `seen`: the state the fast path found (1 or 2). Marks the lock contended (2) and sleeps until it is free.
  [[gnu::noinline]] void lock_contended(int seen) noexcept {
    if (seen != 2) seen = state_.exchange(2, std::memory_order_acquire);
    while (seen != 0) {
      state_.wait(2, std::memory_order_relaxed);
      seen = state_.exchange(2, std::memory_order_acquire);
    }
  }

  std::atomic<int> state_{0};
};

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#pragma once
// raise_to: the lock-free maximum every peak counter of the memory layer keeps.

#include <atomic>
#include <cstddef>

namespace tp::memory::detail {

// Raises `maximum` to `value` unless it is already at least that; a load alone when it is.
inline void raise_to(std::atomic<std::size_t>& maximum, std::size_t value) noexcept {
  std::size_t current = maximum.load(std::memory_order_relaxed);
  while (current < value && !maximum.compare_exchange_weak(current, value, std::memory_order_relaxed)) {}
}

}  // namespace tp::memory::detail

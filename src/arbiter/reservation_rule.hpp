// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one rule every MemoryArbiter applies, kept in one place so the in-process and shared-memory arbiters
// cannot drift apart. Internal header.

#include <cstddef>

#include "tensorpool/arbiter/memory_arbiter.hpp"

namespace tp::arbiter::detail {

// Requires the arbiter's invariants (reserved <= quota, total <= budget), so neither subtraction wraps.
inline bool within_quota(std::size_t quota, std::size_t reserved, std::size_t bytes) noexcept {
  return bytes <= quota - reserved;
}
inline bool within_budget(std::size_t budget, std::size_t total, std::size_t bytes) noexcept {
  return bytes <= budget - total;
}

// Fills the flags of a refusal whose other fields hold the state before the request.
inline void classify(ReserveRefusal& refusal, std::size_t bytes) noexcept {
  refusal.over_quota = !within_quota(refusal.client.quota_bytes, refusal.client.reserved_bytes, bytes);
  refusal.over_budget = !within_budget(refusal.budget_bytes, refusal.reserved_bytes, bytes);
}

}  // namespace tp::arbiter::detail

// SPDX-License-Identifier: Apache-2.0
#pragma once
// ArenaOptions as the ExpandableArena tests build them: a limit, the bytes of wholly free granules kept
// committed (0 by default, so committed bytes show exactly what live blocks pin), granule sharing and the
// decay of cached granules beyond the threshold (0 by default: at once, for the same reason).

#include <cstddef>
#include <cstdint>

#include "tensorpool/memory/expandable_arena.hpp"

namespace tp::memory::testing {

inline ArenaOptions arena_options(std::size_t limit, std::size_t release_threshold = 0, bool share_granules = false,
                                  std::uint64_t release_decay_events = 0) {
  ArenaOptions result;
  result.limit_bytes = limit;
  result.release_threshold = release_threshold;
  result.share_granules = share_granules;
  result.release_decay_events = release_decay_events;
  return result;
}

}  // namespace tp::memory::testing

// SPDX-License-Identifier: Apache-2.0
#pragma once
// ArenaOptions as the ExpandableArena tests build them: a limit, the bytes of wholly free granules kept
// committed (0 by default, so committed bytes show exactly what live blocks pin) and granule sharing.

#include <cstddef>

#include "tensorpool/memory/expandable_arena.hpp"

namespace tp::memory::testing {

inline ArenaOptions arena_options(std::size_t limit, std::size_t release_threshold = 0, bool share_granules = false) {
  ArenaOptions result;
  result.limit_bytes = limit;
  result.release_threshold = release_threshold;
  result.share_granules = share_granules;
  return result;
}

}  // namespace tp::memory::testing

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reclaim before growing: what an allocator does before it commits memory beyond what it already holds
// (ExpandableArena, docs/memory.md "Reclaim before growing"). Growth is the only moment a footprint rises, so
// the work that lowers it runs there and nowhere else: a request that fits in what the allocator holds never
// reaches it.
//   1. The growth hook, when the growth would take the reservation past its peak: the layers above give back
//      blocks they keep allocated but do not use (a ThreadCacheAdaptor composed over the arena by hand sets it
//      to its flush; a MemoryStack builds no cache over the arena and sets none). Then the request is placed
//      again.
//   2. Compaction before growth (ArenaOptions::compact_before_growth, with a Relocator registered by the
//      blocks' owner): when growing would leave more than the slack free inside the reservation, the blocks of
//      the emptiest granules move into holes elsewhere (evacuation) or, when that frees too few, live blocks
//      slide down over the holes, and the request is placed again. Only then does the allocator grow.

#include <cstddef>
#include <functional>

namespace tp::memory {

// Gives blocks back to the allocator; true when it gave any. Called without the allocator's lock (it frees
// into it), on the thread whose request would grow the allocator; must not throw.
using GrowthHook = std::function<bool()>;

// What reclaiming before growth did over an allocator's life.
struct GrowthPressureStats {
  std::size_t growth_requests = 0;  // requests that would have committed new memory (the hook's, past the
                                    // peak reservation, and compaction's only entry)
  std::size_t hooks_run = 0;        // growth hook calls
  std::size_t hooks_released = 0;   // ...that gave something back
  std::size_t compactions = 0;      // compactions before growth that moved blocks
  std::size_t evacuations = 0;      // ...of which evacuated granules (the others slid)
  std::size_t growth_avoided = 0;   // requests then served without new memory
  std::size_t blocks_moved = 0;     // over the compactions
  std::size_t bytes_copied = 0;
  std::size_t bytes_remapped = 0;
  std::size_t granules_freed = 0;
};

}  // namespace tp::memory

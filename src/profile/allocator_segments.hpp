// SPDX-License-Identifier: Apache-2.0
#pragma once
// The allocator's segment map (internal to src/profile): BFC regions with their chunks, the expandable arena's
// one range with its blocks, or, for `system`, one segment per live allocation. Blocks in use get the tag of
// the live tensor at their address, when `live` has it. Takes the allocator's lock for the copy.

#include <vector>

#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/profile/memory_snapshot.hpp"

namespace tp::profile {

std::vector<SnapshotSegment> allocator_segments(const memory::MemoryResource& allocator,
                                                const std::vector<LiveTensor>& live);

}  // namespace tp::profile

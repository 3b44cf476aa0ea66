// SPDX-License-Identifier: Apache-2.0
#pragma once
// Opening, creating and unlinking the POSIX shared-memory segment behind SharedMemoryArbiter. Internal
// header: the arbiter owns the mapping these functions return.

#include <cstddef>
#include <string>

#include "arbiter/shared_arbiter_layout.hpp"

namespace tp::arbiter::detail {

// Throws tp::InvalidArgument unless `name` is "/" followed by 1-254 characters with no other "/".
void check_segment_name(const std::string& name);

// Maps the segment `name`, creating and initialising it when it is absent or was never initialised (its
// creator died first). Creation and checks run under flock(LOCK_EX) on the segment, so concurrent openers
// see either nothing or a complete table. Throws tp::DeviceError naming the segment and the fix when the OS
// refuses, another uid owns it, group or others may access it, or its size, layout version, slot count or
// budget differ from this build's and `budget_bytes`.
SharedTable* map_segment(const std::string& name, std::size_t budget_bytes);

// Unmaps a table map_segment returned (null is a no-op).
void unmap_segment(SharedTable* table) noexcept;

// shm_unlink; false when absent, tp::DeviceError on another failure.
bool unlink_segment(const std::string& name);

}  // namespace tp::arbiter::detail

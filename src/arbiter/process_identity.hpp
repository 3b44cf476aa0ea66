// SPDX-License-Identifier: Apache-2.0
#pragma once
// Whether the process that registered a shared-memory client still exists. A pid alone is not enough: the
// kernel recycles pids, so a slot also records the process's start time (field 22 of /proc/<pid>/stat, in
// clock ticks since boot), which differs between two processes that had the same pid. Internal header.
//
// All functions are noexcept and allocate nothing (they run inside the arbiter's noexcept paths).

#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace tp::arbiter::detail {

// The process's start time, or nullopt when /proc has no such process (or it cannot be read).
std::optional<std::uint64_t> process_start_time(pid_t pid) noexcept;

// True when `pid` no longer names the process that started at `start_time`: kill(pid, 0) fails with ESRCH,
// /proc shows another start time, or the process is a zombie (it has exited and holds nothing; its parent
// just has not reaped it yet).
bool process_is_gone(pid_t pid, std::uint64_t start_time) noexcept;

}  // namespace tp::arbiter::detail

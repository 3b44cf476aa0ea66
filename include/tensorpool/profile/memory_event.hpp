// SPDX-License-Identifier: Apache-2.0
#pragma once
// MemoryEvent: one allocation, free, refused allocation or move on a device, as the profiler records it into its
// bounded ring (device_recorder.hpp). Fixed-size and string-free so that recording stays cheap: the tag is an
// index into the recording device's tag table (MemorySnapshot carries the table).

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tp::profile {

// relocate: a compaction moved a live allocation (MemoryResource::compact): it is neither freed nor allocated
// again, only its address changes.
enum class EventAction : std::uint8_t { allocate, free, failure, relocate };

// "allocate", "free", "failure", "relocate".
std::string_view to_string(EventAction action) noexcept;

struct MemoryEvent {
  EventAction action = EventAction::allocate;
  std::uint32_t tag = 0;            // index into the device's tag table
  std::uintptr_t address = 0;       // 0 for a failure
  std::size_t requested_bytes = 0;  // as the caller asked
  std::size_t allocated_bytes = 0;  // what the allocator set aside (its rounding); 0 for a failure
  std::uint64_t stream = 0;         // allocations are device-wide (stream-ordered reuse is the device's job): 0
  std::uint64_t thread = 0;         // small id per thread, in order of first event (0, 1, ...)
  std::uint64_t sequence = 0;       // per device, 0 for its first event, gap-free (dropped events included)
  std::int64_t step = -1;           // the tag's training step, -1 outside a step
  std::int64_t time_ns = 0;         // since the profiler started
  // The device's figures after the event (a free: after it leaves the live set, before the allocator takes
  // the memory back, so reserved bytes and the largest free block are the allocator's just before the free).
  std::size_t in_use_bytes = 0;  // allocated bytes of the live allocations
  std::size_t requested_in_use_bytes = 0;
  // A relocate's are those of the event before it: the allocator is mid-compaction and cannot be asked.
  std::size_t reserved_bytes = 0;
  std::size_t largest_free_block = 0;
  std::uintptr_t moved_from = 0;  // a relocate: the address the allocation left (address is its new one)
};

}  // namespace tp::profile

// SPDX-License-Identifier: Apache-2.0
#pragma once
// AllocationObserver: the hook the profiler attaches to a TrackingAdaptor to see every allocation and free
// as it happens. Kept minimal on purpose: a pointer, its requested size and, on allocate, its tag.
//
// Calls arrive in the order the adaptor serves them (a free of a pointer is reported before any later
// allocation that reuses it), under the adaptor's lock: implementations must be quick, must not throw and
// must not call back into the adaptor they observe.

#include <cstddef>

#include "tensorpool/memory/allocation_tag.hpp"

namespace tp::memory {

class AllocationObserver {
 public:
  virtual ~AllocationObserver() = default;
  virtual void on_allocate(void* ptr, std::size_t bytes, const AllocationTag& tag) noexcept = 0;
  virtual void on_deallocate(void* ptr, std::size_t bytes) noexcept = 0;
  // A compaction moved the live allocation at `from` to `to` (same bytes, same tag): it is not a free and an
  // allocation, and the allocator's lock is held, so an implementation must not ask the allocator anything.
  virtual void on_relocate(void* from, void* to, std::size_t bytes) noexcept = 0;
  // A request the upstream refused (it is about to leave as tp::OutOfMemoryError). The live allocations are
  // still intact, which is what an out-of-memory snapshot needs. Default: ignored.
  virtual void on_failure(std::size_t /*bytes*/, const AllocationTag& /*tag*/) noexcept {}

 protected:
  AllocationObserver() = default;
  AllocationObserver(const AllocationObserver&) = default;
  AllocationObserver& operator=(const AllocationObserver&) = default;
};

}  // namespace tp::memory

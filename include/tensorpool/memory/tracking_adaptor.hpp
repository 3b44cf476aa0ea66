// SPDX-License-Identifier: Apache-2.0
#pragma once
// TrackingAdaptor: records every outstanding allocation (pointer -> requested bytes, AllocationTag, time,
// thread, sequence number), so profiles and out-of-memory reports can name the tensors that hold memory.
// When the upstream throws tp::OutOfMemoryError, the report is amended with the largest live allocations
// (at most kReportedLiveAllocations, largest first, with their tags) and rethrown. Observers (the profiler)
// see each allocation and free as it is served; see allocation_observer.hpp.
//
// Invariant: live_ holds exactly the allocations served through this adaptor and not yet freed, each
// under the pointer the upstream returned; next_sequence_ exceeds every sequence number in live_.
// Thread safety: one mutex guards live_, next_sequence_ and observers_; it is not held while the upstream
// allocates. A free is recorded (and observed) before the memory goes back upstream, so a pointer's free is
// always recorded before its reuse.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tensorpool/memory/allocation_observer.hpp"
#include "tensorpool/memory/resource_adaptor.hpp"

namespace tp::memory {

struct TrackedAllocation {
  void* ptr = nullptr;
  std::size_t bytes = 0;  // as requested by the caller
  AllocationTag tag;
  std::int64_t time_ns = 0;    // std::chrono::steady_clock time of the allocation, in nanoseconds
  std::thread::id thread;      // thread that allocated
  std::uint64_t sequence = 0;  // 0 for the first allocation through this adaptor, then 1, 2, ...
};

class TrackingAdaptor final : public ResourceAdaptor {
 public:
  static constexpr std::size_t kReportedLiveAllocations = 10;

  explicit TrackingAdaptor(std::unique_ptr<MemoryResource> upstream, std::string name = "tracking");
  explicit TrackingAdaptor(MemoryResource& upstream, std::string name = "tracking");

  // Outstanding allocations in allocation order (by sequence).
  [[nodiscard]] std::vector<TrackedAllocation> live_allocations() const;
  // The n largest outstanding allocations, largest first (ties: older first).
  [[nodiscard]] std::vector<TrackedAllocation> largest_live(std::size_t n) const;
  [[nodiscard]] std::size_t live_count() const;

  // The observer must stay alive until removed or until this adaptor is destroyed. Adding one twice is a
  // no-op; removing one that is not registered is a no-op.
  void add_observer(AllocationObserver& observer);
  void remove_observer(AllocationObserver& observer);

 private:
  struct Record {
    std::size_t bytes = 0;
    AllocationTag tag;
    std::int64_t time_ns = 0;
    std::thread::id thread;
    std::uint64_t sequence = 0;
  };

  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  // The records (and the observers' view) move with their blocks, under mutex_ held across the compaction.
  CompactionResult do_compact(Relocator& relocator) override;
  void record(void* ptr, std::size_t bytes, const AllocationTag& tag);

  mutable std::mutex mutex_;  // guards live_, next_sequence_, observers_
  std::unordered_map<void*, Record> live_;
  std::uint64_t next_sequence_ = 0;
  std::vector<AllocationObserver*> observers_;
};

}  // namespace tp::memory

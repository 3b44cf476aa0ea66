// SPDX-License-Identifier: Apache-2.0
#pragma once
// DeviceRecorder: the profiler's observer on one device's memory stack (an AllocationObserver of its
// TrackingAdaptor). It keeps, per allocation and free, a fixed-size MemoryEvent in a bounded ring (the oldest
// are dropped and counted), the live set with tags, running bytes per kind and per op, each op's high-water
// mark, and a copy of the live set whenever the device's allocated bytes reach a new peak.
//
// Cost per event: one hash lookup of the tag (interned without its step), one of the address, the
// allocator's allocated_size() and stats() (each one short lock), and O(kinds + ops) at a new peak only.
//
// Invariants (under mutex_): in_use_ = sum of allocated bytes in live_, by_kind_ and op_current_ split it;
// peak_.in_use_bytes >= in_use_; events_ holds at most capacity_ events, the newest last, and
// dropped_ + events_.size() = next_sequence_; baseline_by_kind_ is the per-kind live bytes just before the
// oldest retained event.
// Thread safety: callbacks arrive under the tracking adaptor's lock (one device, serialised); readers take
// mutex_, which is never held while calling into the stack. Lock order: tracking -> this -> allocator.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorpool/memory/allocation_observer.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/profile/memory_snapshot.hpp"

namespace tp::profile {

class DeviceRecorder final : public memory::AllocationObserver {
 public:
  // `stack` must outlive the recorder; `epoch_ns` is the steady-clock time events count from. `on_failure`
  // (may be empty) runs after a refused request was recorded, outside mutex_ (the out-of-memory snapshot).
  DeviceRecorder(std::string device, memory::MemoryStack& stack, std::size_t capacity, std::int64_t epoch_ns,
                 std::function<void(const std::string& device)> on_failure = {});

  void on_allocate(void* ptr, std::size_t bytes, const memory::AllocationTag& tag) noexcept override;
  void on_deallocate(void* ptr, std::size_t bytes) noexcept override;
  // The live allocation keeps its tag, sequence and bytes at its new address; a relocate event records the move.
  void on_relocate(void* from, void* to, std::size_t bytes) noexcept override;
  void on_failure(std::size_t bytes, const memory::AllocationTag& tag) noexcept override;

  // Adds allocations that were live before the recorder was attached (allocated_size from the stack), as
  // they were, without events; call before attaching. Later frees of unknown addresses are ignored.
  void seed(const std::vector<memory::TrackedAllocation>& live);
  // Fills the recorder's part of `snapshot` (tags, live set, events, peak, high-water marks); the caller fills
  // the stack's part. Never calls into the tracking adaptor, so it is safe inside on_failure.
  void fill(DeviceSnapshot& snapshot) const;
  // Peaks and op high-water marks restart from the current live set.
  void reset_peaks();
  const std::string& device() const noexcept { return device_; }
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  struct Live {
    std::size_t requested = 0;
    std::size_t allocated = 0;
    std::uint32_t tag = 0;
    std::int64_t step = -1;
    std::uint64_t sequence = 0;
    std::int64_t time_ns = 0;
  };
  struct TagInfo {
    std::size_t kind = 0;  // AllocationKind as an index
    std::uint32_t op = 0;  // index into op_names_
  };

  std::uint32_t intern(const memory::AllocationTag& tag);  // requires mutex_
  void push(const MemoryEvent& event);                     // requires mutex_
  void capture_peak();                                     // requires mutex_

  const std::string device_;
  memory::MemoryStack& stack_;
  const std::size_t capacity_;
  const std::int64_t epoch_ns_;
  const std::function<void(const std::string&)> on_failure_;

  mutable std::mutex mutex_;  // guards everything below
  std::unordered_map<std::string, std::uint32_t> tag_index_;
  std::vector<memory::AllocationTag> tags_;
  std::vector<TagInfo> tag_info_;
  std::unordered_map<std::string, std::uint32_t> op_index_;
  std::vector<std::string> op_names_;
  std::vector<std::size_t> op_current_, op_high_water_;
  std::vector<std::uint64_t> op_allocations_;
  std::unordered_map<std::uintptr_t, Live> live_;
  KindBytes by_kind_{};
  KindBytes baseline_by_kind_{};
  std::size_t in_use_ = 0, requested_in_use_ = 0;
  std::uint64_t total_allocated_ = 0, total_freed_ = 0, failures_ = 0;
  PeakBreakdown peak_;
  std::vector<MemoryEvent> events_;  // ring: events_[head_] is the oldest once full
  std::size_t head_ = 0;
  std::uint64_t next_sequence_ = 0, dropped_ = 0;
};

}  // namespace tp::profile

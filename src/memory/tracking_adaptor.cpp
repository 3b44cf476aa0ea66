// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/tracking_adaptor.hpp"

#include <algorithm>
#include <utility>

#include "core/rekey.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

TrackingAdaptor::TrackingAdaptor(std::unique_ptr<MemoryResource> upstream, std::string name)
    : ResourceAdaptor(std::move(upstream), std::move(name)) {}

TrackingAdaptor::TrackingAdaptor(MemoryResource& upstream, std::string name)
    : ResourceAdaptor(upstream, std::move(name)) {}

void* TrackingAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  void* ptr = nullptr;
  try {
    ptr = upstream_allocate(bytes, alignment, tag);
  } catch (OutOfMemoryError& error) {
    std::vector<LiveAllocation> largest;
    for (TrackedAllocation& live : largest_live(kReportedLiveAllocations)) {
      largest.push_back(LiveAllocation{live.bytes, std::move(live.tag)});
    }
    error.amend([&largest](OutOfMemoryReport& report) { report.largest_live = std::move(largest); });
    {
      const std::lock_guard lock(mutex_);
      for (AllocationObserver* observer : observers_) observer->on_failure(bytes, tag);
    }
    throw;
  }
  try {
    record(ptr, bytes, tag);
  } catch (...) {
    upstream_deallocate(ptr, bytes);  // could not record it (out of host memory): give it back
    throw;
  }
  return ptr;
}

void TrackingAdaptor::record(void* ptr, std::size_t bytes, const AllocationTag& tag) {
  Record entry{bytes, tag, now_ns(), std::this_thread::get_id(), 0};
  const std::lock_guard lock(mutex_);
  entry.sequence = next_sequence_;
  live_.insert_or_assign(ptr, std::move(entry));
  ++next_sequence_;
  for (AllocationObserver* observer : observers_) observer->on_allocate(ptr, bytes, tag);
}

void TrackingAdaptor::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  {
    const std::lock_guard lock(mutex_);
    live_.erase(ptr);
    for (AllocationObserver* observer : observers_) observer->on_deallocate(ptr, bytes);
  }
  upstream_deallocate(ptr, bytes);
}

CompactionResult TrackingAdaptor::do_compact(Relocator& relocator) {
  // Moves each record with its block, with mutex_ held across the whole compaction: no allocation or free is
  // recorded between a block's move and its record's. Lock order as on every path: this adaptor, then the
  // allocator (whose lock is held while the relocator is told).
  class Rekeying final : public Relocator {
   public:
    Rekeying(Relocator& owner, std::unordered_map<void*, Record>& live,
             const std::vector<AllocationObserver*>& observers) noexcept
        : owner_(owner), live_(live), observers_(observers) {}
    bool can_move(const void* ptr, std::size_t bytes) override { return owner_.can_move(ptr, bytes); }
    void relocated(void* from, void* to, std::size_t bytes) noexcept override {
      rekey(live_, from, to);
      for (AllocationObserver* observer : observers_) observer->on_relocate(from, to, bytes);
      owner_.relocated(from, to, bytes);
    }

   private:
    Relocator& owner_;
    std::unordered_map<void*, Record>& live_;
    const std::vector<AllocationObserver*>& observers_;
  };
  const std::lock_guard lock(mutex_);
  Rekeying rekeying(relocator, live_, observers_);
  return upstream().compact(rekeying);
}

std::vector<TrackedAllocation> TrackingAdaptor::live_allocations() const {
  std::vector<TrackedAllocation> result;
  {
    const std::lock_guard lock(mutex_);
    result.reserve(live_.size());
    for (const auto& [ptr, entry] : live_) {
      result.push_back(TrackedAllocation{ptr, entry.bytes, entry.tag, entry.time_ns, entry.thread, entry.sequence});
    }
  }
  std::sort(result.begin(), result.end(),
            [](const TrackedAllocation& a, const TrackedAllocation& b) { return a.sequence < b.sequence; });
  return result;
}

std::vector<TrackedAllocation> TrackingAdaptor::largest_live(std::size_t n) const {
  // Pick the n largest under the lock without copying every tag, then copy just those.
  std::vector<std::pair<void*, const Record*>> candidates;
  std::vector<TrackedAllocation> result;
  const std::lock_guard lock(mutex_);
  candidates.reserve(live_.size());
  for (const auto& [ptr, entry] : live_) candidates.emplace_back(ptr, &entry);
  const std::size_t count = std::min(n, candidates.size());
  auto order = [](const std::pair<void*, const Record*>& a, const std::pair<void*, const Record*>& b) {
    return a.second->bytes != b.second->bytes ? a.second->bytes > b.second->bytes
                                              : a.second->sequence < b.second->sequence;
  };
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(count), candidates.end(),
                    order);
  result.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const Record& entry = *candidates[i].second;
    result.push_back(
        TrackedAllocation{candidates[i].first, entry.bytes, entry.tag, entry.time_ns, entry.thread, entry.sequence});
  }
  return result;
}

std::size_t TrackingAdaptor::live_count() const {
  const std::lock_guard lock(mutex_);
  return live_.size();
}

void TrackingAdaptor::add_observer(AllocationObserver& observer) {
  const std::lock_guard lock(mutex_);
  if (std::find(observers_.begin(), observers_.end(), &observer) == observers_.end()) {
    observers_.push_back(&observer);
  }
}

void TrackingAdaptor::remove_observer(AllocationObserver& observer) {
  const std::lock_guard lock(mutex_);
  std::erase(observers_, &observer);
}

}  // namespace tp::memory

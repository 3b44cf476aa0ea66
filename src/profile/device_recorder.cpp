// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/profile/device_recorder.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <utility>

#include "core/rekey.hpp"
#include "profile/allocator_segments.hpp"
#include "tensorpool/core/log.hpp"

namespace tp::profile {
namespace {

std::int64_t steady_now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Small thread ids in order of first event, process-wide (one thread reads the same id on every device).
std::uint64_t thread_number() noexcept {
  static std::atomic<std::uint64_t> next{0};
  thread_local const std::uint64_t number = next.fetch_add(1, std::memory_order_relaxed);
  return number;
}

// The tag without its step: one entry per tensor however many steps allocate it.
std::string tag_key(const memory::AllocationTag& tag) {
  std::string key;
  key.reserve(tag.name.size() + tag.op.size() + tag.dtype.size() + 8 * tag.shape.size() + 4);
  key += tag.name;
  key += '\x1f';
  key += tag.op;
  key += '\x1f';
  key += tag.dtype;
  key += '\x1f';
  for (std::int64_t dim : tag.shape) {
    key += std::to_string(dim);
    key += ',';
  }
  key += static_cast<char>('0' + static_cast<int>(tag.kind));
  return key;
}

}  // namespace

DeviceRecorder::DeviceRecorder(std::string device, memory::MemoryStack& stack, std::size_t capacity,
                               std::int64_t epoch_ns, std::function<void(const std::string&)> on_failure)
    : device_(std::move(device)),
      stack_(stack),
      capacity_(std::max<std::size_t>(1, capacity)),
      epoch_ns_(epoch_ns),
      on_failure_(std::move(on_failure)) {
  events_.reserve(std::min<std::size_t>(capacity_, 4096));
}

std::uint32_t DeviceRecorder::intern(const memory::AllocationTag& tag) {
  std::string key = tag_key(tag);
  const auto found = tag_index_.find(key);
  if (found != tag_index_.end()) return found->second;
  const auto index = static_cast<std::uint32_t>(tags_.size());
  memory::AllocationTag stored = tag;
  stored.step = -1;  // steps live in the events
  tags_.push_back(std::move(stored));
  auto [op, added] = op_index_.try_emplace(tag.op, static_cast<std::uint32_t>(op_names_.size()));
  if (added) {
    op_names_.push_back(tag.op);
    op_current_.push_back(0);
    op_high_water_.push_back(0);
    op_allocations_.push_back(0);
  }
  tag_info_.push_back({static_cast<std::size_t>(tag.kind) % kKinds, op->second});
  tag_index_.emplace(std::move(key), index);
  return index;
}

void DeviceRecorder::push(const MemoryEvent& event) {
  if (events_.size() < capacity_) {
    events_.push_back(event);
    return;
  }
  // The oldest event leaves: fold it into the baseline so a timeline stacked by kind still starts right.
  const MemoryEvent& oldest = events_[head_];
  const std::size_t kind = tag_info_[oldest.tag].kind;
  if (oldest.action == EventAction::allocate) baseline_by_kind_[kind] += oldest.allocated_bytes;
  if (oldest.action == EventAction::free) baseline_by_kind_[kind] -= oldest.allocated_bytes;
  events_[head_] = event;
  head_ = (head_ + 1) % capacity_;
  ++dropped_;
}

void DeviceRecorder::capture_peak() {
  peak_.in_use_bytes = in_use_;
  peak_.requested_bytes = requested_in_use_;
  peak_.sequence = next_sequence_ > 0 ? next_sequence_ - 1 : 0;
  peak_.time_ns = steady_now_ns() - epoch_ns_;
  peak_.by_kind.clear();
  peak_.by_op.clear();
  peak_.tensors.clear();
  std::vector<BreakdownRow> kinds(kKinds), ops(op_names_.size());
  for (const auto& [address, live] : live_) {
    const TagInfo& info = tag_info_[live.tag];
    for (BreakdownRow* row : {&kinds[info.kind], &ops[info.op]}) {
      row->requested_bytes += live.requested;
      row->allocated_bytes += live.allocated;
      ++row->tensors;
    }
    peak_.tensors.push_back(
        {address, live.requested, live.allocated, live.tag, live.step, live.sequence, live.time_ns});
  }
  for (std::size_t kind = 0; kind < kKinds; ++kind) {
    if (kinds[kind].tensors == 0) continue;
    kinds[kind].key = std::string(memory::to_string(static_cast<memory::AllocationKind>(kind)));
    peak_.by_kind.push_back(std::move(kinds[kind]));
  }
  for (std::size_t op = 0; op < ops.size(); ++op) {
    if (ops[op].tensors == 0) continue;
    ops[op].key = op_names_[op].empty() ? "<no op>" : op_names_[op];
    peak_.by_op.push_back(std::move(ops[op]));
  }
  auto larger = [](const BreakdownRow& a, const BreakdownRow& b) { return a.allocated_bytes > b.allocated_bytes; };
  std::sort(peak_.by_kind.begin(), peak_.by_kind.end(), larger);
  std::sort(peak_.by_op.begin(), peak_.by_op.end(), larger);
  std::sort(peak_.tensors.begin(), peak_.tensors.end(), [](const LiveTensor& a, const LiveTensor& b) {
    return a.allocated_bytes != b.allocated_bytes ? a.allocated_bytes > b.allocated_bytes : a.sequence < b.sequence;
  });
  // Lock order tracking -> recorder -> allocator: the allocator never calls back up, so this cannot deadlock.
  peak_.segments = allocator_segments(stack_.allocator(), peak_.tensors);
}

void DeviceRecorder::on_allocate(void* ptr, std::size_t bytes, const memory::AllocationTag& tag) noexcept {
  try {
    // Ask the allocator (below the tracking adaptor) before taking our lock: lock order tracking -> allocator.
    const std::size_t allocated = stack_.allocator().allocated_size(ptr, bytes);
    const memory::MemoryStats allocator_stats = stack_.allocator().stats();
    const std::int64_t now = steady_now_ns() - epoch_ns_;
    const std::lock_guard lock(mutex_);
    const std::uint32_t index = intern(tag);
    const TagInfo info = tag_info_[index];
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    live_.insert_or_assign(address, Live{bytes, allocated, index, tag.step, next_sequence_, now});
    in_use_ += allocated;
    requested_in_use_ += bytes;
    total_allocated_ += allocated;
    by_kind_[info.kind] += allocated;
    op_current_[info.op] += allocated;
    op_high_water_[info.op] = std::max(op_high_water_[info.op], op_current_[info.op]);
    ++op_allocations_[info.op];
    push({EventAction::allocate, index, address, bytes, allocated, 0, thread_number(), next_sequence_++, tag.step, now,
          in_use_, requested_in_use_, allocator_stats.bytes_reserved, allocator_stats.largest_free_block});
    if (in_use_ > peak_.in_use_bytes) capture_peak();
  } catch (const std::exception& error) {  // out of host memory while recording: the allocation stands
    TP_LOG(warning, "profile", device_, ": an allocation was not recorded: ", error.what());
  }
}

void DeviceRecorder::on_relocate(void* from, void* to, std::size_t /*bytes*/) noexcept {
  const std::int64_t now = steady_now_ns() - epoch_ns_;
  const auto old_address = reinterpret_cast<std::uintptr_t>(from);
  const auto address = reinterpret_cast<std::uintptr_t>(to);
  const std::lock_guard lock(mutex_);
  const Live* const moved = rekey(live_, old_address, address);
  if (moved == nullptr) return;  // allocated before the recorder was attached
  const Live& live = *moved;
  // The allocator is mid-compaction (its lock held): its figures are those of the newest event.
  const MemoryEvent newest = events_.empty() ? MemoryEvent{} : events_[(head_ + events_.size() - 1) % events_.size()];
  try {
    push({EventAction::relocate, live.tag, address, live.requested, live.allocated, 0, thread_number(),
          next_sequence_++, live.step, now, in_use_, requested_in_use_, newest.reserved_bytes,
          newest.largest_free_block, old_address});
  } catch (const std::exception& error) {
    TP_LOG(warning, "profile", device_, ": a move was not recorded: ", error.what());
  }
}

void DeviceRecorder::on_deallocate(void* ptr, std::size_t bytes) noexcept {
  try {
    const memory::MemoryStats allocator_stats = stack_.allocator().stats();
    const std::int64_t now = steady_now_ns() - epoch_ns_;
    const std::lock_guard lock(mutex_);
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    const auto found = live_.find(address);
    if (found == live_.end()) return;  // allocated before the recorder was attached
    const Live live = found->second;
    live_.erase(found);
    const TagInfo info = tag_info_[live.tag];
    in_use_ -= live.allocated;
    requested_in_use_ -= live.requested;
    total_freed_ += live.allocated;
    by_kind_[info.kind] -= live.allocated;
    op_current_[info.op] -= live.allocated;
    push({EventAction::free, live.tag, address, bytes, live.allocated, 0, thread_number(), next_sequence_++, live.step,
          now, in_use_, requested_in_use_, allocator_stats.bytes_reserved, allocator_stats.largest_free_block});
  } catch (const std::exception& error) {
    TP_LOG(warning, "profile", device_, ": a free was not recorded: ", error.what());
  }
}

void DeviceRecorder::on_failure(std::size_t bytes, const memory::AllocationTag& tag) noexcept {
  try {
    const memory::MemoryStats allocator_stats = stack_.allocator().stats();
    const std::int64_t now = steady_now_ns() - epoch_ns_;
    {
      const std::lock_guard lock(mutex_);
      const std::uint32_t index = intern(tag);
      ++failures_;
      push({EventAction::failure, index, 0, bytes, 0, 0, thread_number(), next_sequence_++, tag.step, now, in_use_,
            requested_in_use_, allocator_stats.bytes_reserved, allocator_stats.largest_free_block});
    }
    if (on_failure_) on_failure_(device_);
  } catch (const std::exception& error) {
    TP_LOG(warning, "profile", device_, ": the failed request was not recorded: ", error.what());
  }
}

void DeviceRecorder::seed(const std::vector<memory::TrackedAllocation>& live) {
  for (const memory::TrackedAllocation& allocation : live) {
    const std::size_t allocated = stack_.allocator().allocated_size(allocation.ptr, allocation.bytes);
    const std::lock_guard lock(mutex_);
    const std::uint32_t index = intern(allocation.tag);
    const TagInfo info = tag_info_[index];
    live_.insert_or_assign(reinterpret_cast<std::uintptr_t>(allocation.ptr),
                           Live{allocation.bytes, allocated, index, allocation.tag.step, 0, 0});
    in_use_ += allocated;
    requested_in_use_ += allocation.bytes;
    by_kind_[info.kind] += allocated;
    baseline_by_kind_[info.kind] += allocated;
    op_current_[info.op] += allocated;
    op_high_water_[info.op] = std::max(op_high_water_[info.op], op_current_[info.op]);
  }
  const std::lock_guard lock(mutex_);
  if (in_use_ > peak_.in_use_bytes) capture_peak();
}

void DeviceRecorder::fill(DeviceSnapshot& snapshot) const {
  const std::lock_guard lock(mutex_);
  snapshot.recording = true;
  snapshot.tags = tags_;
  snapshot.live.clear();
  for (const auto& [address, live] : live_) {
    snapshot.live.push_back(
        {address, live.requested, live.allocated, live.tag, live.step, live.sequence, live.time_ns});
  }
  std::sort(snapshot.live.begin(), snapshot.live.end(),
            [](const LiveTensor& a, const LiveTensor& b) { return a.sequence < b.sequence; });
  snapshot.total_allocated_bytes = total_allocated_;
  snapshot.total_freed_bytes = total_freed_;
  snapshot.failures = failures_;
  snapshot.peak = peak_;
  snapshot.op_high_water.clear();
  for (std::size_t op = 0; op < op_names_.size(); ++op) {
    snapshot.op_high_water.push_back(
        {op_names_[op].empty() ? "<no op>" : op_names_[op], op_high_water_[op], op_current_[op], op_allocations_[op]});
  }
  std::sort(snapshot.op_high_water.begin(), snapshot.op_high_water.end(),
            [](const OpHighWater& a, const OpHighWater& b) { return a.high_water_bytes > b.high_water_bytes; });
  snapshot.events.clear();
  snapshot.events.reserve(events_.size());
  for (std::size_t index = 0; index < events_.size(); ++index) {
    snapshot.events.push_back(events_[(head_ + index) % events_.size()]);
  }
  snapshot.dropped_events = dropped_;
  snapshot.baseline_by_kind = baseline_by_kind_;
}

void DeviceRecorder::reset_peaks() {
  const std::lock_guard lock(mutex_);
  op_high_water_ = op_current_;
  capture_peak();  // the current live set is the new peak (an invariant: peak >= in use)
}

}  // namespace tp::profile

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/device/event.hpp"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "device/poll_before_sleeping.hpp"

namespace tp::device {

struct Event::State {
  std::mutex mutex;
  std::condition_variable completed_condition;
  // Only ever goes false -> true, stored under mutex (so a waiter on the condition cannot miss it); atomic so
  // that waiters poll it without the mutex first (poll_before_sleeping) and query() never blocks.
  std::atomic<bool> completed{false};
  // Immutable after creation: the backend-native handle (null: none) and the owner tag it belongs to.
  std::shared_ptr<void> native;
  const void* native_owner = nullptr;
};

Event Event::pending(std::shared_ptr<void> native, const void* owner) {
  Event event;
  event.state_ = std::make_shared<State>();
  event.state_->native = std::move(native);
  event.state_->native_owner = event.state_->native != nullptr ? owner : nullptr;
  return event;
}

void* Event::native(const void* owner) const noexcept {
  if (state_ == nullptr || owner == nullptr || state_->native_owner != owner) return nullptr;
  return state_->native.get();
}

void Event::complete() const noexcept {
  {
    std::lock_guard lock(state_->mutex);
    state_->completed.store(true, std::memory_order_release);
  }
  state_->completed_condition.notify_all();
}

bool Event::query() const { return state_ == nullptr || state_->completed.load(std::memory_order_acquire); }

void Event::synchronize() const {
  if (state_ == nullptr) return;
  if (detail::poll_before_sleeping([this] { return query(); })) return;
  sleep_until_complete();
}

void Event::sleep_until_complete() const {
  if (query()) return;
  std::unique_lock lock(state_->mutex);
  state_->completed_condition.wait(lock, [this] { return state_->completed.load(std::memory_order_relaxed); });
}

}  // namespace tp::device

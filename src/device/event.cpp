#include "tensorpool/device/event.hpp"

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "device/poll_before_sleeping.hpp"

namespace tp::device {

struct Event::State {
  std::mutex mutex;
  std::condition_variable completed_condition;
  bool completed = false;  // guarded by mutex; only ever goes false -> true
  // Mirrors `completed` for waiters that poll before they lock (poll_before_sleeping); set after it, under mutex.
  std::atomic<bool> completed_flag{false};
};

Event Event::pending() {
  Event event;
  event.state_ = std::make_shared<State>();
  return event;
}

void Event::complete() const noexcept {
  {
    std::lock_guard lock(state_->mutex);
    state_->completed = true;
    state_->completed_flag.store(true, std::memory_order_release);
  }
  state_->completed_condition.notify_all();
}

bool Event::query() const {
  if (state_ == nullptr) return true;
  std::lock_guard lock(state_->mutex);
  return state_->completed;
}

void Event::synchronize() const {
  if (state_ == nullptr) return;
  if (detail::poll_before_sleeping([this] { return state_->completed_flag.load(std::memory_order_acquire); })) return;
  std::unique_lock lock(state_->mutex);
  state_->completed_condition.wait(lock, [this] { return state_->completed; });
}

}  // namespace tp::device

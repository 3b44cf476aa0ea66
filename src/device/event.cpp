#include "tensorpool/device/event.hpp"

#include <condition_variable>
#include <mutex>

namespace tp::device {

struct Event::State {
  std::mutex mutex;
  std::condition_variable completed_condition;
  bool completed = false;  // guarded by mutex; only ever goes false -> true
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
  std::unique_lock lock(state_->mutex);
  state_->completed_condition.wait(lock, [this] { return state_->completed; });
}

}  // namespace tp::device

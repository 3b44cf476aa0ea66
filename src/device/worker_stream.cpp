#include "device/worker_stream.hpp"

#include <algorithm>
#include <utility>

#include "device/poll_before_sleeping.hpp"

namespace tp::device {

WorkerStream::WorkerStream(Device& device, std::size_t index) : Stream(device, index), worker_([this] { serve(); }) {}

WorkerStream::~WorkerStream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  worker_.join();
}

void WorkerStream::do_enqueue(Task task) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
    enqueued_.fetch_add(1, std::memory_order_release);
  }
  work_available_.notify_one();
}

bool WorkerStream::do_idle() const {
  std::lock_guard lock(mutex_);
  return completed_ == enqueued_;
}

void WorkerStream::wait_idle() {
  // A task waiting for its own stream would wait for itself; everything enqueued before it has run.
  if (Stream::current() == this) return;
  std::unique_lock lock(mutex_);
  const std::uint64_t target = enqueued_;
  while (completed_ < target) {
    // Re-registered after every wake-up: the worker resets wake_at_ when it wakes everybody.
    wake_at_ = std::min(wake_at_, target);
    work_completed_.wait(lock);
  }
}

void WorkerStream::serve() {
  std::uint64_t taken = 0;  // tasks this worker has popped; only it pops
  for (;;) {
    Task task;
    detail::poll_before_sleeping([&] { return enqueued_.load(std::memory_order_acquire) > taken; });
    {
      std::unique_lock lock(mutex_);
      work_available_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything enqueued has run
      task = std::move(queue_.front());
      queue_.pop_front();
      ++taken;
    }
    run(task, /*propagate=*/false);  // destroys the task's captures
    bool wake = false;
    {
      std::lock_guard lock(mutex_);
      ++completed_;
      if (completed_ >= wake_at_) {
        wake_at_ = kNobodyWaits;
        wake = true;
      }
    }
    if (wake) work_completed_.notify_all();
  }
}

}  // namespace tp::device

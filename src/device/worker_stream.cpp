#include "device/worker_stream.hpp"

#include <utility>

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
    ++enqueued_;
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
  work_completed_.wait(lock, [&] { return completed_ >= target; });
}

void WorkerStream::serve() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      work_available_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything enqueued has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    run(task, /*propagate=*/false);  // destroys the task's captures
    {
      std::lock_guard lock(mutex_);
      ++completed_;
    }
    work_completed_.notify_all();
  }
}

}  // namespace tp::device

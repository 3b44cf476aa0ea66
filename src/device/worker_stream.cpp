// SPDX-License-Identifier: Apache-2.0
#include "device/worker_stream.hpp"

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

bool WorkerStream::do_idle() const { return completed_.value() == enqueued_.load(std::memory_order_acquire); }

void WorkerStream::wait_idle() {
  // A task waiting for its own stream would wait for itself; everything enqueued before it has run.
  if (Stream::current() == this) return;
  completed_.wait_for(enqueued_.load(std::memory_order_acquire));
}

void WorkerStream::serve() {
  std::uint64_t taken = 0;  // tasks this worker has popped; only it pops
  for (;;) {
    Task task;
    detail::poll_before_sleeping([&] { return enqueued_.load(std::memory_order_acquire) > taken; });
    {
      std::unique_lock lock(mutex_);
      work_available_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;        // stopping, and everything enqueued has run
      task = std::move(queue_.front());  // leaves the slot empty: the captures go with `task`
      queue_.pop_front();
      ++taken;
    }
    run(task, /*propagate=*/false);  // destroys the task's captures
    completed_.add_one();
  }
}

}  // namespace tp::device

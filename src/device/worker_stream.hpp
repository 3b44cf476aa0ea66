// SPDX-License-Identifier: Apache-2.0
#pragma once
// WorkerStream: a stream served by its own thread (the sim backend): enqueue() returns at once and the
// worker runs the tasks in order. Invariants: completed_ <= enqueued_; a task counts as completed only once
// it has run (or been skipped) and its captures are destroyed, so a waiter that sees it completed also sees
// its buffers released. The destructor runs every task already enqueued, then joins the thread.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "device/completion_count.hpp"
#include "device/ring_queue.hpp"
#include "tensorpool/device/stream.hpp"

namespace tp::device {

class WorkerStream final : public Stream {
 public:
  WorkerStream(Device& device, std::size_t index);
  ~WorkerStream() override;

 private:
  void do_enqueue(Task task) override;
  bool do_idle() const override;
  void wait_idle() override;
  void serve();

  mutable std::mutex mutex_;  // guards queue_, enqueued_ (writes), stopping_
  std::condition_variable work_available_;
  detail::RingQueue<Task> queue_;
  // Written under mutex_; atomic so that the worker polls it without the mutex before it sleeps
  // (poll_before_sleeping), and wait_idle() reads its target without the mutex.
  std::atomic<std::uint64_t> enqueued_{0};
  CompletionCount completed_;
  bool stopping_ = false;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace tp::device

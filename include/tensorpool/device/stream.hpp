// SPDX-License-Identifier: Apache-2.0
#pragma once
// Stream: an ordered queue of work on one device (as a CUDA stream). Tasks run one at a time in enqueue
// order; work on different streams may run concurrently. Cross-stream order comes only from events
// (record on one stream, wait on another).
//
// Stream-ordered memory: a task holds (by capture) every Buffer it touches, and a task is destroyed right
// after it runs, before the stream counts it done. So a buffer whose last handle the host drops while work
// that uses it is pending goes back to the allocator only once that work has completed: its memory is never
// reused under a running kernel, on every backend.
//
// Errors: a task's exception is kept; the stream skips the tasks behind it and synchronize() rethrows it
// (then the stream is usable again), as CUDA reports asynchronous errors at the next synchronization. An
// inline stream (cpu) runs the task in enqueue() and its exception propagates from there.
//
// Backend-native order: record() and wait() are non-virtual and call do_record()/do_wait(), whose defaults
// are host events (a task completes the event; a task blocks on it). A backend with device events (opencl's
// marker cl_events, cuda's cudaEvent_t) overrides them: its record() returns an event carrying its native
// handle (pending_event), completed host-side once the device got there (complete_event), and its wait() on
// an event whose handle it owns (native_handle) orders its device queue without blocking any thread.

#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "tensorpool/device/event.hpp"
#include "tensorpool/device/stream_task.hpp"

namespace tp::device {

class Device;

class Stream {
 public:
  using Task = StreamTask;

  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device& device() const noexcept { return device_; }
  std::size_t index() const noexcept { return index_; }
  // "sim:0/stream:1".
  std::string name() const;

  // Enqueues `task` behind everything enqueued before.
  void enqueue(Task task);
  // An event that completes once everything enqueued so far has run.
  [[nodiscard]] Event record() { return do_record(); }
  // Work enqueued after this call starts only once `event` has completed.
  void wait(const Event& event);
  // Blocks until everything enqueued so far has run; rethrows the first error a task raised since the last
  // synchronize().
  void synchronize();
  // True when no enqueued work is pending (never blocks).
  [[nodiscard]] bool idle() const { return do_idle(); }
  // True while a task error is kept: later kernels and copies are skipped until synchronize() reports it.
  // Never blocks.
  [[nodiscard]] bool failed() const noexcept { return has_error_.load(std::memory_order_acquire); }

  // The stream whose task the calling thread is running, or null on a plain host thread. Host code that
  // touches device memory outside a task is a bug that Tensor::data() reports through this.
  static Stream* current() noexcept;

 protected:
  Stream(Device& device, std::size_t index) : device_(device), index_(index) {}

  // Runs `task` with current() set to this stream; a task error is kept for synchronize() unless
  // `propagate`, and once an error is kept later tasks are skipped. Destroys the task's captures before it
  // returns.
  void run(Task& task, bool propagate);
  // Waits until everything enqueued so far has run, without reporting errors.
  virtual void wait_idle() = 0;
  // Keeps `error` as a task error raised outside run() (a device command that failed), as run() does: the
  // first one is kept, later tasks are skipped until synchronize() reports it.
  void keep_error(std::exception_ptr error) noexcept;

  // The default record: an event completed by a task behind everything enqueued so far.
  virtual Event do_record();
  // The default wait (called only for an event not yet complete): a task that blocks until `event` completes.
  virtual void do_wait(const Event& event);

  // For backends with native events (friendship with Event is not inherited): a pending event carrying
  // `native` with the owner tag `owner`; its completion (once, after the device passed it); and the handle of
  // `event` when its owner tag is `owner` (null otherwise, and for host events).
  static Event pending_event(std::shared_ptr<void> native, const void* owner) {
    return Event::pending(std::move(native), owner);
  }
  static void complete_event(const Event& event) noexcept { event.complete(); }
  static void* native_handle(const Event& event, const void* owner) noexcept { return event.native(owner); }

 private:
  friend class Device;
  virtual void do_enqueue(Task task) = 0;
  virtual bool do_idle() const = 0;

  Device& device_;
  const std::size_t index_;
  mutable std::mutex error_mutex_;
  std::exception_ptr error_;            // guarded by error_mutex_; the first unreported task error
  std::atomic<bool> has_error_{false};  // error_ != nullptr, readable without the lock
};

}  // namespace tp::device

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/device/stream.hpp"

#include <utility>

#include "device/denormals.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::device {

namespace {
thread_local Stream* current_stream = nullptr;
}

Stream* Stream::current() noexcept { return current_stream; }

std::string Stream::name() const { return device_.name() + "/stream:" + std::to_string(index_); }

void Stream::enqueue(Task task) {
  // Behind a kept error the stream skips kernels and copies; record()/wait() tasks are not bound to the flag,
  // so events still complete and no stream waiting on this one hangs.
  task.cancel_when(&has_error_);
  do_enqueue(std::move(task));
}

Event Stream::do_record() {
  Event event = Event::pending();
  do_enqueue([event] { event.complete(); });
  return event;
}

void Stream::wait(const Event& event) {
  if (event.query()) return;
  do_wait(event);
}

void Stream::do_wait(const Event& event) {
  do_enqueue([event] { event.synchronize(); });
}

void Stream::keep_error(std::exception_ptr error) noexcept {
  std::lock_guard lock(error_mutex_);
  if (error_ == nullptr) error_ = std::move(error);
  has_error_.store(true, std::memory_order_release);
}

void Stream::synchronize() {
  wait_idle();
  std::exception_ptr error;
  {
    std::lock_guard lock(error_mutex_);
    error = std::exchange(error_, nullptr);
    has_error_.store(false, std::memory_order_release);
  }
  if (error != nullptr) std::rethrow_exception(error);
}

void Stream::run(Task& task, bool propagate) {
  const ScopedFlushDenormals flush_denormals;
  Stream* const outer = std::exchange(current_stream, this);
  try {
    task();
  } catch (...) {
    current_stream = outer;
    task = nullptr;  // drop the captures (buffers) before reporting, as on success
    if (propagate) throw;
    keep_error(std::current_exception());
    return;
  }
  current_stream = outer;
  task = nullptr;
}

}  // namespace tp::device

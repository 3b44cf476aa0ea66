// SPDX-License-Identifier: Apache-2.0
#include "backend/opencl/opencl_stream.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "backend/opencl/opencl_launch.hpp"
#include "device/poll_before_sleeping.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::opencl {
namespace {

// The native handle of an event an OpenClStream recorded: its marker cl_event, set (resolved) once the
// recording stream's worker has enqueued the marker; null after resolution when no marker could be enqueued.
// Resolved exactly once, before the event completes host-side.
class MarkerSlot {
 public:
  MarkerSlot() = default;
  MarkerSlot(const MarkerSlot&) = delete;
  MarkerSlot& operator=(const MarkerSlot&) = delete;
  ~MarkerSlot() {
    if (marker_ != nullptr) clReleaseEvent(marker_);
  }

  // `marker` (may be null) is retained here for the slot's life.
  void resolve(cl_event marker) noexcept {
    if (marker != nullptr) clRetainEvent(marker);
    {
      std::lock_guard lock(mutex_);
      marker_ = marker;
      resolved_.store(true, std::memory_order_release);
    }
    resolved_condition_.notify_all();
  }
  // The marker, once resolved (blocks the caller, a waiting stream's worker, until then).
  cl_event await() {
    if (!device::detail::poll_before_sleeping([this] { return resolved_.load(std::memory_order_acquire); })) {
      std::unique_lock lock(mutex_);
      resolved_condition_.wait(lock, [this] { return resolved_.load(std::memory_order_relaxed); });
    }
    return marker_;  // written before resolved_ was released
  }

 private:
  std::mutex mutex_;
  std::condition_variable resolved_condition_;
  std::atomic<bool> resolved_{false};  // false -> true once, stored under mutex_
  cl_event marker_ = nullptr;          // written once, before resolved_
};

// The completer thread's stream: its wait_idle() returns at once there (a capture's destructor that waited
// for its own stream would wait for itself), as it does on the worker (Stream::current()).
thread_local const OpenClStream* retiring_stream = nullptr;

}  // namespace

OpenClStream::OpenClStream(device::Device& device, std::size_t index, cl_context context, cl_command_queue queue,
                           std::size_t max_in_flight)
    : Stream(device, index),
      context_(context),
      queue_(queue),
      max_in_flight_(std::max<std::size_t>(max_in_flight, 1)),
      completer_([this] { retire(); }),
      worker_([this] { serve(); }) {}

OpenClStream::~OpenClStream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  worker_.join();     // runs every item already enqueued
  completer_.join();  // retires every entry the worker handed over
}

void OpenClStream::push(Item item) {
  {
    std::lock_guard lock(mutex_);
    items_.push_back(std::move(item));
    enqueued_.fetch_add(1, std::memory_order_release);
  }
  work_available_.notify_one();
}

void OpenClStream::do_enqueue(Task task) { push(Item{ItemKind::host, std::move(task), {}}); }

void OpenClStream::enqueue_commands(Commands commands) { push(Item{ItemKind::commands, std::move(commands), {}}); }

device::Event OpenClStream::do_record() {
  device::Event event = pending_event(std::make_shared<MarkerSlot>(), context_);
  push(Item{ItemKind::record, nullptr, event});
  return event;
}

void OpenClStream::do_wait(const device::Event& event) { push(Item{ItemKind::wait, nullptr, event}); }

bool OpenClStream::do_idle() const { return completed_.value() == enqueued_.load(std::memory_order_acquire); }

std::size_t OpenClStream::in_flight() const {
  std::lock_guard lock(mutex_);
  return outstanding_;
}

std::size_t OpenClStream::peak_in_flight() const {
  std::lock_guard lock(mutex_);
  return peak_outstanding_;
}

void OpenClStream::wait_idle() {
  if (Stream::current() == this || retiring_stream == this) return;
  completed_.wait_for(enqueued_.load(std::memory_order_acquire));
}

void OpenClStream::serve() {
  std::uint64_t taken = 0;  // items this worker has popped; only it pops
  for (;;) {
    Item item;
    device::detail::poll_before_sleeping([&] { return enqueued_.load(std::memory_order_acquire) > taken; });
    {
      std::unique_lock lock(mutex_);
      work_available_.wait(lock, [this] { return stopping_ || !items_.empty(); });
      if (items_.empty()) break;  // stopping, and every item has run
      item = std::move(items_.front());
      items_.pop_front();
      ++taken;
    }
    run_item(item);
  }
  {
    std::lock_guard lock(mutex_);
    worker_done_ = true;
  }
  entries_available_.notify_all();
}

void OpenClStream::run_item(Item& item) {
  switch (item.kind) {
    case ItemKind::host:
      wait_for_outstanding_below(1);        // every earlier command has completed and released its captures
      run(item.task, /*propagate=*/false);  // skipped inside behind a kept error (Stream::enqueue's wrapper)
      completed_.add_one();
      return;
    case ItemKind::commands: {
      wait_for_outstanding_below(max_in_flight_);
      if (!failed()) {
        // run() destroys what it runs: run a reference, so the captures stay with the marker.
        Task body = [&item] { item.task(); };
        run(body, /*propagate=*/false);
      }
      // Also after an error or a skip: commands enqueued before a throw still use the captures.
      mark(std::move(item.task), std::nullopt);
      return;
    }
    case ItemKind::record:
      wait_for_outstanding_below(max_in_flight_);
      mark(nullptr, item.event);
      return;
    case ItemKind::wait: {
      auto* slot = static_cast<MarkerSlot*>(native_handle(item.event, context_));
      cl_event marker = slot != nullptr ? slot->await() : nullptr;
      Entry entry;
      if (marker != nullptr) {
        wait_for_outstanding_below(max_in_flight_);
        const cl_int code = clEnqueueBarrierWithWaitList(queue_, 1, &marker, &entry.event);
        if (code != CL_SUCCESS) {
          entry.event = nullptr;
          keep_device_error(code, "clEnqueueBarrierWithWaitList");
          item.event.synchronize();
        }
      } else {
        item.event.synchronize();  // a host event, or another context's: later commands wait here
      }
      hand_over(std::move(entry));  // counted complete in order, after the entries before it
      return;
    }
  }
}

void OpenClStream::mark(Task captures, std::optional<device::Event> completes) {
  Entry entry;
  entry.captures = std::move(captures);
  entry.completes = std::move(completes);
  const cl_int code = clEnqueueMarkerWithWaitList(queue_, 0, nullptr, &entry.event);
  if (code != CL_SUCCESS) {
    entry.event = nullptr;
    keep_device_error(code, "clEnqueueMarkerWithWaitList");
    clFinish(queue_);  // no marker to wait for: the captures go only once the queue has run their commands
  }
  if (entry.completes.has_value()) {
    // Before the entry can complete: a stream waiting on the event finds its marker.
    if (auto* slot = static_cast<MarkerSlot*>(native_handle(*entry.completes, context_))) slot->resolve(entry.event);
  }
  hand_over(std::move(entry));
}

void OpenClStream::hand_over(Entry entry) {
  {
    std::lock_guard lock(mutex_);
    entries_.push_back(std::move(entry));
    ++outstanding_;
    peak_outstanding_ = std::max(peak_outstanding_, outstanding_);
  }
  entries_available_.notify_one();
}

void OpenClStream::wait_for_outstanding_below(std::size_t limit) {
  std::unique_lock lock(mutex_);
  room_available_.wait(lock, [&] { return outstanding_ < limit; });
}

void OpenClStream::retire() {
  retiring_stream = this;
  for (;;) {
    Entry entry;
    {
      std::unique_lock lock(mutex_);
      entries_available_.wait(lock, [this] { return worker_done_ || !entries_.empty(); });
      if (entries_.empty()) return;  // the worker has ended and everything it handed over is retired
      entry = std::move(entries_.front());
      entries_.pop_front();
    }
    if (entry.event != nullptr) {
      const cl_int waited = clWaitForEvents(1, &entry.event);
      cl_int status = CL_COMPLETE;
      const cl_int queried =
          clGetEventInfo(entry.event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
      if (queried != CL_SUCCESS) {
        keep_device_error(queried, "clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS)");
      } else if (status < 0) {
        keep_device_error(status, nullptr);
      } else if (waited != CL_SUCCESS) {
        keep_device_error(waited, "clWaitForEvents");
      }
      clReleaseEvent(entry.event);
    }
    entry.captures = nullptr;  // buffers go back to the allocator only now, after their commands
    if (entry.completes.has_value()) complete_event(*entry.completes);
    entry.completes.reset();
    {
      std::lock_guard lock(mutex_);
      --outstanding_;
    }
    room_available_.notify_one();
    completed_.add_one();
  }
}

void OpenClStream::keep_device_error(cl_int code, const char* what) noexcept {
  try {
    if (what == nullptr) {
      // An execution status: implementation-defined negative codes (PoCL reports -1 for a command that
      // failed or waited on one that did), so the number is given without a name.
      TP_THROW(DeviceError, "opencl", name(), ": a command failed on the device (execution status ", code,
               "): a command on this stream, or an event it waited for, failed");
    }
    check(code, std::string(what) + " on " + name());
  } catch (...) {
    keep_error(std::current_exception());
  }
}

}  // namespace tp::backend::opencl

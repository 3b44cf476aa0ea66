// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "backend/cuda/cuda_error.hpp"
#include "backend/cuda/cuda_stream_impl.hpp"
#include "device/poll_before_sleeping.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::cuda {

const char kCudaEventOwner = 0;

namespace {

// The native handle of an event a CudaStreamImpl recorded: its own cudaEvent_t (owned: destroyed with the
// slot, so a stream that waits on it after the recording stream retired it still finds it), set (resolved)
// once the recording stream's worker has recorded it; null after resolution when it could not be recorded.
// Resolved exactly once, before the event completes host-side.
class EventSlot {
 public:
  EventSlot() = default;
  EventSlot(const EventSlot&) = delete;
  EventSlot& operator=(const EventSlot&) = delete;
  ~EventSlot() {
    if (owned_ != nullptr) report_teardown_failure(cudaEventDestroy(owned_), "cudaEventDestroy (a recorded event)");
  }

  // Takes `event` (may be null); `recorded` says whether it is on the stream (else waiters block the host).
  void resolve(cudaEvent_t event, bool recorded) noexcept {
    {
      std::lock_guard lock(mutex_);
      owned_ = event;
      recorded_ = recorded ? event : nullptr;
      resolved_.store(true, std::memory_order_release);
    }
    resolved_condition_.notify_all();
  }
  // The recorded event, once resolved (blocks the caller, a waiting stream's worker, until then).
  cudaEvent_t await() {
    if (!device::detail::poll_before_sleeping([this] { return resolved_.load(std::memory_order_acquire); })) {
      std::unique_lock lock(mutex_);
      resolved_condition_.wait(lock, [this] { return resolved_.load(std::memory_order_relaxed); });
    }
    return recorded_;  // written before resolved_ was released
  }

 private:
  std::mutex mutex_;
  std::condition_variable resolved_condition_;
  std::atomic<bool> resolved_{false};  // false -> true once, stored under mutex_
  cudaEvent_t owned_ = nullptr;        // written once, before resolved_
  cudaEvent_t recorded_ = nullptr;     // owned_ when recorded; written once, before resolved_
};

// The completer thread's stream: its wait_idle() returns at once there (a capture's destructor that waited
// for its own stream would wait for itself), as it does on the worker (Stream::current()).
thread_local const CudaStreamImpl* retiring_stream = nullptr;

cudaStream_t create_stream(int ordinal) {
  const ScopedDevice scoped(ordinal);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
        "cudaStreamCreateWithFlags(device " + std::to_string(ordinal) + ")");
  return stream;
}

}  // namespace

ScopedDevice::ScopedDevice(int ordinal) {
  int current = 0;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != ordinal) check(cudaSetDevice(ordinal), "cudaSetDevice(" + std::to_string(ordinal) + ")");
  previous_ = current;
}

ScopedDevice::ScopedDevice(int ordinal, std::nothrow_t) noexcept {
  int current = 0;
  cudaError_t status = cudaGetDevice(&current);
  report_teardown_failure(status, "cudaGetDevice");
  if (status != cudaSuccess) return;
  if (current != ordinal) {
    status = cudaSetDevice(ordinal);
    report_teardown_failure(status, "cudaSetDevice");
    if (status != cudaSuccess) return;
  }
  previous_ = current;
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) report_teardown_failure(cudaSetDevice(previous_), "cudaSetDevice (restoring the device)");
}

CudaStream& cuda_stream(device::Stream& stream) {
  auto* cuda = dynamic_cast<CudaStream*>(&stream);
  if (cuda == nullptr) {
    TP_THROW(DeviceError, "cuda", "stream ", stream.name(), " is not a CUDA stream (its device is ",
             stream.device().name(), "); CUDA kernels and copies run only on the streams of cuda devices");
  }
  return *cuda;
}

CudaStreamImpl::CudaStreamImpl(device::Device& device, std::size_t index, int ordinal, std::size_t max_in_flight)
    : CudaStream(device, index),
      ordinal_(ordinal),
      max_in_flight_(std::max<std::size_t>(max_in_flight, 1)),
      stream_(create_stream(ordinal)),
      completer_([this] { retire(); }),
      worker_([this] { serve(); }) {}

CudaStreamImpl::~CudaStreamImpl() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  worker_.join();     // runs every item already enqueued
  completer_.join();  // retires every entry the worker handed over
  // No device to make current (reported unless the process is exiting, when these went with CUDA's state):
  // nothing to destroy them with.
  const ScopedDevice scoped(ordinal_, std::nothrow);
  if (!scoped.ok()) return;
  execs_.clear();  // every launch of them has run: the completer retired it
  for (cudaEvent_t event : events_) report_teardown_failure(cudaEventDestroy(event), "cudaEventDestroy");
  report_teardown_failure(cudaStreamDestroy(stream_), "cudaStreamDestroy");
}

void CudaStreamImpl::push(Item item) {
  {
    std::lock_guard lock(mutex_);
    items_.push_back(std::move(item));
    enqueued_.fetch_add(1, std::memory_order_release);
  }
  work_available_.notify_one();
}

void CudaStreamImpl::do_enqueue(Task task) { push(Item{ItemKind::host, std::move(task), {}}); }

void CudaStreamImpl::enqueue_commands(Commands commands) { push(Item{ItemKind::commands, std::move(commands), {}}); }

void CudaStreamImpl::enqueue_eager_commands(Commands commands) {
  push(Item{ItemKind::eager_commands, std::move(commands), {}});
}

void CudaStreamImpl::after_completion(Commands check) {
  if (Stream::current() != this) {
    TP_THROW(DeviceError, "cuda", name(), ": after_completion is called only inside a command task of the stream");
  }
  checks_.emplace_back(std::move(check));
}

device::Event CudaStreamImpl::do_record() {
  device::Event event = pending_event(std::make_shared<EventSlot>(), &kCudaEventOwner);
  push(Item{ItemKind::record, nullptr, event});
  return event;
}

void CudaStreamImpl::do_wait(const device::Event& event) { push(Item{ItemKind::wait, nullptr, event}); }

bool CudaStreamImpl::do_idle() const { return completed_.value() == enqueued_.load(std::memory_order_acquire); }

std::size_t CudaStreamImpl::in_flight() const {
  std::lock_guard lock(mutex_);
  return outstanding_;
}

std::size_t CudaStreamImpl::peak_in_flight() const {
  std::lock_guard lock(mutex_);
  return peak_outstanding_;
}

void CudaStreamImpl::wait_idle() {
  if (Stream::current() == this || retiring_stream == this) return;
  completed_.wait_for(enqueued_.load(std::memory_order_acquire));
}

void CudaStreamImpl::serve() {
  // Once for the worker's life: every CUDA call of its tasks goes to this stream's device.
  keep_device_error(cudaSetDevice(ordinal_), "cudaSetDevice (the stream's worker)");
  std::uint64_t taken = 0;  // items this worker has popped; only it pops
  for (;;) {
    Item item;
    const bool more =
        device::detail::poll_before_sleeping([&] { return enqueued_.load(std::memory_order_acquire) > taken; });
    // Nothing more came within the poll: the open segment is launched before the worker sleeps, so work that
    // someone waits for is never held back in a capture.
    if (!more) flush_segment();
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
  flush_segment();  // none is open here (the last poll found nothing); kept for the invariant
  {
    std::lock_guard lock(mutex_);
    worker_done_ = true;
  }
  entries_available_.notify_all();
}

void CudaStreamImpl::run_commands(Task& task) {
  if (!failed()) {
    // A launch reports a bad configuration only through the thread's last error, which the launching code
    // reads after each launch (kernels/launch.cuh): clear whatever an earlier call left there, so it is not
    // blamed on this task's launches. Not read after the task: cuBLASLt or a handled refusal may leave a
    // status there that is no failure of the task.
    (void)cudaGetLastError();
    // run() destroys what it runs: run a reference, so the captures stay with the event.
    Task body = [&task] { task(); };
    run(body, /*propagate=*/false);
  }
  // Also after an error or a skip: work enqueued before a throw still uses the captures.
  mark(std::move(task), std::nullopt);
}

void CudaStreamImpl::run_item(Item& item) {
  // Only command tasks are captured: anything else first launches the open segment, so it comes after it.
  if (item.kind != ItemKind::commands) flush_segment();
  switch (item.kind) {
    case ItemKind::host:
      wait_for_outstanding_below(1);        // every earlier command has completed and released its captures
      run(item.task, /*propagate=*/false);  // skipped inside behind a kept error (Stream::enqueue's wrapper)
      completed_.add_one();
      return;
    case ItemKind::commands:
      if (capture_commands(item)) return;  // into the open graph segment (cuda_stream_graphs.cpp)
      wait_for_outstanding_below(max_in_flight_);
      run_commands(item.task);
      return;
    case ItemKind::eager_commands:  // the open segment was launched above: it runs after it, uncaptured
      wait_for_outstanding_below(max_in_flight_);
      run_commands(item.task);
      return;
    case ItemKind::record: {
      wait_for_outstanding_below(max_in_flight_);
      mark(nullptr, item.event);
      return;
    }
    case ItemKind::wait: {
      auto* slot = static_cast<EventSlot*>(native_handle(item.event, &kCudaEventOwner));
      cudaEvent_t awaited = slot != nullptr ? slot->await() : nullptr;
      if (awaited != nullptr) {
        const cudaError_t status = cudaStreamWaitEvent(stream_, awaited, 0);
        if (status != cudaSuccess) {
          keep_device_error(status, "cudaStreamWaitEvent");
          item.event.synchronize();
        }
      } else {
        item.event.synchronize();  // a host event, or one that was never recorded: later work waits here
      }
      // An entry behind the wait: the item completes in order, once the device has passed the wait.
      wait_for_outstanding_below(max_in_flight_);
      mark(nullptr, std::nullopt);
      return;
    }
  }
}

cudaEvent_t CudaStreamImpl::take_event() {
  {
    std::lock_guard lock(mutex_);
    if (!events_.empty()) {
      cudaEvent_t event = events_.back();
      events_.pop_back();
      return event;
    }
  }
  cudaEvent_t event = nullptr;
  const cudaError_t status = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (status != cudaSuccess) {
    keep_device_error(status, "cudaEventCreateWithFlags");
    return nullptr;
  }
  return event;
}

void CudaStreamImpl::mark(Task captures, std::optional<device::Event> completes) {
  Entry entry;
  entry.captures = std::move(captures);
  entry.completes = std::move(completes);
  entry.checks = std::exchange(checks_, {});  // the command just run registered them (none for the others)
  // A record's event belongs to its slot (waiters may use it after this entry retired); the others are pooled.
  EventSlot* slot = entry.completes.has_value()
                        ? static_cast<EventSlot*>(native_handle(*entry.completes, &kCudaEventOwner))
                        : nullptr;
  cudaEvent_t event = nullptr;
  if (slot != nullptr) {
    const cudaError_t created = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (created != cudaSuccess) {
      keep_device_error(created, "cudaEventCreateWithFlags");
      event = nullptr;
    }
  } else {
    event = take_event();
    entry.pooled = event != nullptr;
  }
  bool recorded = false;
  if (event != nullptr) {
    const cudaError_t status = cudaEventRecord(event, stream_);
    recorded = status == cudaSuccess;
    if (!recorded) keep_device_error(status, "cudaEventRecord");
  }
  if (!recorded) {
    // No event to wait for: the captures go only once the stream has run their work.
    keep_device_error(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (no event recorded)");
    if (entry.pooled) {
      report_teardown_failure(cudaEventDestroy(event), "cudaEventDestroy (an event that was not recorded)");
      entry.pooled = false;
    }
  }
  entry.event = recorded ? event : nullptr;
  // Before the entry can complete: a stream waiting on the event finds it. The slot owns its event.
  if (slot != nullptr) slot->resolve(event, recorded);
  hand_over(std::move(entry));
}

void CudaStreamImpl::hand_over(Entry entry) {
  {
    std::lock_guard lock(mutex_);
    entries_.push_back(std::move(entry));
    ++outstanding_;
    peak_outstanding_ = std::max(peak_outstanding_, outstanding_);
  }
  entries_available_.notify_one();
}

void CudaStreamImpl::wait_for_outstanding_below(std::size_t limit) {
  std::unique_lock lock(mutex_);
  room_available_.wait(lock, [&] { return outstanding_ < limit; });
}

void CudaStreamImpl::retire() {
  retiring_stream = this;
  // cudaEventSynchronize needs no current device, but a thread without one would make device 0's context
  // current on its first call: a process that uses only another GPU would pay for a context there.
  keep_device_error(cudaSetDevice(ordinal_), "cudaSetDevice (the stream's completer)");
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
      const cudaError_t status = cudaEventSynchronize(entry.event);
      if (status != cudaSuccess) {
        // A kernel or copy before the event failed on the device (or the context is lost).
        keep_device_error(status, "cudaEventSynchronize (a kernel or copy on this stream failed)");
        if (entry.pooled) report_teardown_failure(cudaEventDestroy(entry.event), "cudaEventDestroy (a failed event)");
      } else if (entry.pooled) {
        std::lock_guard lock(mutex_);
        events_.push_back(entry.event);
      }
    }
    // Without an event the worker synchronized the stream (a failure there is kept): the work has run too.
    run_checks(entry.checks);
    entry.captures = nullptr;  // buffers go back to the allocator only now, after their work
    if (entry.completes.has_value()) complete_event(*entry.completes);
    entry.completes.reset();  // the slot (and its event) may go with it
    {
      std::lock_guard lock(mutex_);
      --outstanding_;
    }
    room_available_.notify_one();
    completed_.add_one();
  }
}

void CudaStreamImpl::run_checks(std::vector<Task>& checks) noexcept {
  for (Task& check : checks) {
    if (failed()) break;  // a failed kernel or an earlier check: its results may be missing, the first error stays
    try {
      check();
    } catch (...) {
      keep_error(std::current_exception());
    }
  }
  checks.clear();  // what they hold (a status slot) goes here, after the device wrote it
}

void CudaStreamImpl::keep_device_error(cudaError_t status, const char* call) noexcept {
  if (status == cudaSuccess) return;
  try {
    check(status, std::string(call) + " on " + name());
  } catch (...) {
    keep_error(std::current_exception());
  }
}

}  // namespace tp::backend::cuda

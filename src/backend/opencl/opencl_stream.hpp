// SPDX-License-Identifier: Apache-2.0
#pragma once
// OpenClStream: a stream of an opencl device, served by one in-order command queue, a worker thread that
// enqueues on it and a completer thread that retires what the queue has run.
//
// - A command task (enqueue_commands: a launch or a copy) runs on the worker and enqueues its commands
//   without waiting; the worker then enqueues a marker (clEnqueueMarkerWithWaitList) and hands the marker,
//   with the task itself (its captures: buffers, staging blocks, host memory owners), to the completer. The
//   completer waits for the markers in order (clWaitForEvents), then destroys the captures, then counts the
//   task complete: a buffer the host dropped goes back to the allocator only after the commands that use it
//   have run (stream-ordered reuse), and nothing is released from an OpenCL callback.
// - At most max_in_flight() markers are outstanding (enqueued, not retired); the worker waits for room before
//   it enqueues more, so captures cannot pile up.
// - record() is a marker: its Event carries the marker cl_event (owner tag: the cl_context) and completes,
//   host-side, once the completer has retired it and everything before it. wait(event) on an event carrying
//   a marker of the same context is a barrier on this queue (clEnqueueBarrierWithWaitList): no thread blocks,
//   apart from the worker waiting for the recording worker to have enqueued that marker. Any other event
//   blocks the worker before it enqueues later commands (the host wait of every stream).
// - A host task (Stream::enqueue) runs on the worker once every earlier command has completed (the worker
//   drains the queue first), so it sees their results, as on sim.
// - Errors: an exception from a command task, a marker or barrier whose command failed (execution status
//   < 0), or a call that failed is kept as the stream's error (Stream::keep_error): later tasks are skipped,
//   synchronize() rethrows; records still complete their events, so nothing waiting on them hangs.
//
// Invariants: completed_ <= enqueued_; tasks complete in enqueue order (entries retire in queue order, and a
// host task runs only with nothing outstanding); outstanding_ <= max_in_flight_. Kernel objects and the
// status word are touched only on the worker (opencl_launch.hpp). The destructor runs and retires everything
// already enqueued, then joins both threads; the queue itself belongs to the device and outlives the stream.

#include <CL/cl.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "device/completion_count.hpp"
#include "device/ring_queue.hpp"
#include "tensorpool/device/stream.hpp"

namespace tp::backend::opencl {

class OpenClStream final : public device::Stream {
 public:
  // A command task: enqueues commands on queue() without waiting for them. Its captures stay alive until the
  // commands it enqueued (everything on the queue before its marker) have completed.
  using Commands = std::function<void()>;
  static constexpr std::size_t kDefaultMaxInFlight = 32;

  // `queue` (an in-order queue of `context`) is borrowed: it must outlive the stream.
  OpenClStream(device::Device& device, std::size_t index, cl_context context, cl_command_queue queue,
               std::size_t max_in_flight = kDefaultMaxInFlight);
  ~OpenClStream() override;

  cl_command_queue queue() const noexcept { return queue_; }
  // Enqueues `commands` behind everything enqueued before; skipped (not run) behind a kept error.
  void enqueue_commands(Commands commands);

  // Markers and barriers enqueued and not yet retired (never blocks), and the most there were at once.
  std::size_t in_flight() const;
  std::size_t peak_in_flight() const;
  std::size_t max_in_flight() const noexcept { return max_in_flight_; }

 private:
  enum class ItemKind { host, commands, record, wait };
  // What the host enqueued, waiting for the worker.
  struct Item {
    ItemKind kind = ItemKind::host;
    Task task;            // host: the task; commands: the command task
    device::Event event;  // record: the event to complete; wait: the event to wait for
  };
  // What the worker put on the queue, waiting for the completer.
  struct Entry {
    cl_event event = nullptr;                // the marker or barrier (owned); null: nothing to wait for on the device
    Task captures;                           // destroyed once `event` has completed
    std::optional<device::Event> completes;  // completed after the captures went
  };

  void do_enqueue(Task task) override;
  bool do_idle() const override;
  void wait_idle() override;
  device::Event do_record() override;
  void do_wait(const device::Event& event) override;

  void push(Item item);
  void serve();   // the worker
  void retire();  // the completer
  void run_item(Item& item);
  // Enqueues a marker for `captures` and `completes` and hands it to the completer (on the worker).
  void mark(Task captures, std::optional<device::Event> completes);
  void hand_over(Entry entry);
  // Worker: waits until fewer than max_in_flight_ (for_room) or no entries (drain) are outstanding.
  void wait_for_outstanding_below(std::size_t limit);
  void keep_device_error(cl_int code, const char* what) noexcept;

  // Immutable after construction.
  const cl_context context_;
  const cl_command_queue queue_;
  const std::size_t max_in_flight_;

  mutable std::mutex mutex_;                   // guards everything below up to the threads (enqueued_'s writes)
  std::condition_variable work_available_;     // worker: items_ non-empty or stopping_
  std::condition_variable entries_available_;  // completer: entries_ non-empty or worker_done_
  std::condition_variable room_available_;     // worker: outstanding_ went down
  device::detail::RingQueue<Item> items_;
  device::detail::RingQueue<Entry> entries_;
  // Items pushed; written under mutex_, atomic so that the worker polls it without the mutex before it
  // sleeps (poll_before_sleeping).
  std::atomic<std::uint64_t> enqueued_{0};
  device::CompletionCount completed_;  // items done (host tasks run, entries retired); its own lock
  std::size_t outstanding_ = 0;        // entries handed over and not yet retired (the one being retired included)
  std::size_t peak_outstanding_ = 0;
  bool stopping_ = false;     // the destructor runs: the worker ends once items_ is empty
  bool worker_done_ = false;  // the worker ended: the completer ends once entries_ is empty
  std::thread completer_;     // started before the worker, joined after it
  std::thread worker_;        // last: started once everything above exists
};

}  // namespace tp::backend::opencl

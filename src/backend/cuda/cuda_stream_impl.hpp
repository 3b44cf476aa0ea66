// SPDX-License-Identifier: Apache-2.0
#pragma once
// CudaStreamImpl: the CudaStream of a cuda device (cuda_stream.hpp states the contract), the same design as
// OpenClStream: a worker thread that runs the tasks in order and a completer thread that retires what the
// CUDA stream has run.
//
// - The worker makes the stream's CUDA device current once (cudaSetDevice), then runs each command task
//   through Stream::run (Stream::current() == this) and records a cudaEvent_t behind it; the event and the
//   task (its captures: buffers, staging blocks) go to the completer. The completer waits for the events in
//   order (cudaEventSynchronize), then destroys the captures, then counts the task complete: a buffer the host
//   dropped goes back to the allocator only after the kernels that use it ran (stream-ordered reuse).
// - At most max_in_flight() entries are outstanding (handed to the completer, not yet retired); the worker
//   waits for room before it runs more, so captures cannot pile up.
// - record() gives an Event carrying a slot (owner tag: kCudaEventOwner, one per process) that the worker
//   fills with a cudaEvent_t of its own, recorded on the stream; the completer completes the Event host-side
//   once the device got there. wait(event) on an event with that tag is cudaStreamWaitEvent (no thread
//   blocks, apart from the worker waiting for the recording worker to have recorded it): CUDA events order
//   streams of every device of the process. Any other event blocks the worker before it runs later tasks.
// - A host task (Stream::enqueue) runs on the worker once every earlier command has completed.
// - A command task's after_completion checks go with its entry; the completer runs them after the entry's
//   event completed, before the captures go: the host reads a device result without the worker waiting.
// - Graph capture (set_graph_capture(true); cuda_stream_graphs.cpp; docs/cuda.md, "CUDA graphs"): the worker
//   captures each run of consecutive command tasks (a segment: it ends at any other item, or when no item
//   came within the worker's poll) into a CUDA graph and launches it once; one event behind the launch holds
//   every task's captures and checks, and each task still completes once, in order. A segment CUDA refuses
//   to capture, instantiate or launch has run nothing on the device and runs again eagerly.
// - Errors: an exception from a command task (a failed CUDA call it checked: a copy, a launch whose
//   cudaGetLastError the launching code reads), a failed record or wait, or a kernel that failed on the device
//   (cudaEventSynchronize reports it) is kept as the stream's error (Stream::keep_error): later
//   tasks are skipped, synchronize() rethrows; records still complete their events, so nothing waiting on
//   them hangs.
//
// Invariants: completed_ <= enqueued_; tasks complete in enqueue order; outstanding_ <= max_in_flight_. The
// CUDA stream is created by the constructor and destroyed by the destructor, after it has run and retired
// everything already enqueued and joined both threads.

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_graph_book.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "device/completion_count.hpp"
#include "device/ring_queue.hpp"

namespace tp::backend::cuda {

// The owner tag of the native handles of events that CUDA streams record: one per process, since any CUDA
// stream may cudaStreamWaitEvent on an event of any device.
extern const char kCudaEventOwner;

// Makes CUDA device `ordinal` current on this thread for the scope, then restores the one before.
class ScopedDevice {
 public:
  // Throws tp::DeviceError when CUDA cannot read or set the current device.
  explicit ScopedDevice(int ordinal);
  // For noexcept teardown paths: a failure is reported through report_teardown_failure (quiet when the process
  // is exiting) and leaves ok() false, the current device unchanged.
  ScopedDevice(int ordinal, std::nothrow_t) noexcept;
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  // Whether `ordinal` is current for the scope.
  [[nodiscard]] bool ok() const noexcept { return previous_ >= 0; }

 private:
  int previous_ = -1;  // -1: the current device was not read, nothing to restore
};

class CudaStreamImpl final : public CudaStream {
 public:
  static constexpr std::size_t kDefaultMaxInFlight = 64;

  // A stream of `device` on CUDA device `ordinal`, with a CUDA stream of its own (cudaStreamNonBlocking: no
  // implicit order with the legacy default stream). Throws tp::DeviceError when CUDA refuses the stream.
  CudaStreamImpl(device::Device& device, std::size_t index, int ordinal,
                 std::size_t max_in_flight = kDefaultMaxInFlight);
  ~CudaStreamImpl() override;

  cudaStream_t native() const noexcept override { return stream_; }
  int ordinal() const noexcept override { return ordinal_; }
  void enqueue_commands(Commands commands) override;
  void enqueue_eager_commands(Commands commands) override;
  void after_completion(Commands check) override;
  void set_graph_capture(bool on) noexcept override;

  // Entries recorded and not yet retired (never blocks), and the most there were at once.
  std::size_t in_flight() const;
  std::size_t peak_in_flight() const;
  std::size_t max_in_flight() const noexcept { return max_in_flight_; }
  // Graph capture's counts (never block): segments launched as graphs, and segments run again eagerly
  // because CUDA refused their capture, instantiation or launch.
  std::size_t graph_launches() const noexcept { return graph_launches_.load(std::memory_order_relaxed); }
  std::size_t eager_reruns() const noexcept { return eager_reruns_.load(std::memory_order_relaxed); }

 private:
  // eager_commands: a command task that is never captured (enqueue_eager_commands).
  enum class ItemKind { host, commands, eager_commands, record, wait };
  // What the host enqueued, waiting for the worker.
  struct Item {
    ItemKind kind = ItemKind::host;
    Task task;            // host: the task; commands, eager_commands: the command task
    device::Event event;  // record: the event to complete; wait: the event to wait for
  };
  // What the worker recorded on the stream, waiting for the completer.
  struct Entry {
    cudaEvent_t event = nullptr;             // behind the commands; null: nothing to wait for on the device
    bool pooled = false;                     // `event` goes back to events_ (else a record slot owns it)
    Task captures;                           // destroyed once `event` has completed
    std::optional<device::Event> completes;  // completed after the captures went
    std::vector<Task> checks;                // after_completion's, run once `event` has completed
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
  // Worker: runs a command task eagerly (skipped behind a kept error) and hands its captures over.
  void run_commands(Task& task);
  // Worker, graph capture (cuda_stream_graphs.cpp). capture_commands: runs `item`'s task into the open
  // segment (opening one when capture is on); false when capture is off and the caller runs it eagerly.
  // flush_segment: ends the open segment's capture and launches its graph (or reruns it eagerly); no-op when
  // none is open. executable_of: the segment's executable, updated or instantiated (nullopt: refused).
  bool capture_commands(Item& item);
  void flush_segment();
  std::optional<cudaGraphExec_t> executable_of(cudaGraph_t graph);
  void rerun_segment_eagerly();
  void hand_over_segment();
  void capture_failed(const char* call, cudaError_t status) noexcept;
  // Records an event behind everything on the stream and hands it, with `captures` and `completes`, to the
  // completer (on the worker). A record's event (`completes` carries its slot) is its own, the others pooled.
  void mark(Task captures, std::optional<device::Event> completes);
  void hand_over(Entry entry);
  // Worker: waits until fewer than `limit` entries are outstanding.
  void wait_for_outstanding_below(std::size_t limit);
  // A pooled event (created on the worker, whose device is current), or null after keeping the error.
  cudaEvent_t take_event();
  void keep_device_error(cudaError_t status, const char* call) noexcept;
  // Completer: runs `checks` (an entry's, its event completed) unless the stream failed; the first exception
  // becomes the stream's error.
  void run_checks(std::vector<Task>& checks) noexcept;

  // Immutable after construction.
  const int ordinal_;
  const std::size_t max_in_flight_;
  cudaStream_t stream_ = nullptr;
  std::vector<Task> checks_;  // worker only: after_completion's of the command task running now

  // Graph capture. graph_capture_: set by any thread, read by the worker when it opens a segment. The rest
  // is the worker's only: capturing_ <=> the CUDA stream is capturing and segment_ holds its tasks (each run
  // once into the capture), segment_checks_ their after_completion checks.
  std::atomic<bool> graph_capture_{false};
  bool capturing_ = false;
  std::vector<Task> segment_;
  std::vector<Task> segment_checks_;
  ExecCache<cudaGraphExec_t> execs_{[](cudaGraphExec_t exec) { (void)cudaGraphExecDestroy(exec); }};
  CaptureFailures capture_failures_;
  std::atomic<std::size_t> graph_launches_{0};  // written by the worker only
  std::atomic<std::size_t> eager_reruns_{0};    // written by the worker only

  mutable std::mutex mutex_;                   // guards everything below up to the threads (enqueued_'s writes)
  std::condition_variable work_available_;     // worker: items_ non-empty or stopping_
  std::condition_variable entries_available_;  // completer: entries_ non-empty or worker_done_
  std::condition_variable room_available_;     // worker: outstanding_ went down
  device::detail::RingQueue<Item> items_;
  device::detail::RingQueue<Entry> entries_;
  std::vector<cudaEvent_t> events_;  // retired pooled events, for reuse
  // Items pushed; written under mutex_, atomic so that the worker polls it without the mutex before it sleeps.
  std::atomic<std::uint64_t> enqueued_{0};
  device::CompletionCount completed_;  // items done (host tasks run, entries retired); its own lock
  std::size_t outstanding_ = 0;        // entries handed over and not yet retired (the one being retired included)
  std::size_t peak_outstanding_ = 0;
  bool stopping_ = false;     // the destructor runs: the worker ends once items_ is empty
  bool worker_done_ = false;  // the worker ended: the completer ends once entries_ is empty
  std::thread completer_;     // started before the worker, joined after it
  std::thread worker_;        // last: started once everything above exists
};

}  // namespace tp::backend::cuda

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Device: one place tensors live and kernels run, with its own memory stack (built from a MemoryConfig) and
// one or more Streams. Backends (src/backend/<kind>) derive from it and supply the streams and the copy
// primitives; everything else (allocation with stream-ordered reuse, staging of copies, the debug poison,
// access checks) lives here once.
//
// Invariants: every Buffer this device hands out is returned through release() exactly once, by the
// Buffer's destructor; live_buffers() counts those not yet returned. Buffers must not outlive their device
// (the DeviceManager keeps devices for the life of the process). Streams outlive every task they run.

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "tensorpool/device/device_id.hpp"
#include "tensorpool/device/gemm_choice.hpp"
#include "tensorpool/device/stream.hpp"
#include "tensorpool/memory/allocation_tag.hpp"
#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/memory/memory_stack.hpp"

namespace tp {
class Buffer;
}

namespace tp::device {

struct CopyRequest;

// How the kernels a device runs compute: given when the device is made (DeviceOptions::kernels) and changed
// later with Device::configure_kernels (a Session applies its SessionOptions to the devices it uses). A
// backend reads the fields it has and ignores the others; each field's default leaves the setting as it is.
struct KernelOptions {
  // Threads of one CPU kernel (cpu and sim devices): the GEMM blocks and the element-wise loops. One pool
  // serves every CPU kernel of the process, so the latest value given to any device holds. 0: unchanged.
  int intra_op_threads = 0;
  // The float32 GEMM library of the CPU kernels, per device: "auto" (what a device starts with: per shape
  // class, the faster of the two on this machine, timed at its first product; Device::gemm_choices),
  // "openblas" or "onednn" (oneDNN's AVX-512 kernels). The two sum in different orders, so their results
  // differ in the last bits; pin one for bits reproducible across processes. Empty: unchanged.
  std::string gemm_library{};
};

struct DeviceOptions {
  std::size_t num_streams = 1;
  // Debug: fill freed memory with kPoisonByte before it goes back to the allocator, so a kernel that reads
  // a buffer after its release sees NaN (0xFFFF... as float) instead of plausible stale values.
  bool poison_freed = false;
  KernelOptions kernels{};
};

inline constexpr unsigned char kPoisonByte = 0xFF;

// What keeps a copy's source unchanged until the copy has read it (device::copy).
enum class SourceRelease {
  // The source stream's later work waits for the read: copy() records that on the source's stream.
  wait_for_read,
  // The caller writes nothing into the source before it has synchronized the destination stream (as
  // Session::run with its feeds: run returns only then). Nothing needs to wait, and a destination that reads
  // the source's memory directly (a sim device reading a host buffer) copies it in one transfer on its own
  // stream instead of the host first staging it: the host neither copies nor blocks.
  caller_synchronizes,
};

// Bytes on their way from a device to host memory (Device::read_to_host_async): `bytes` holds them once
// `ready` has completed.
struct HostReadback {
  std::shared_ptr<void> bytes;
  Event ready;
};

class Device {
 public:
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceId& id() const noexcept { return id_; }
  DeviceKind kind() const noexcept { return id_.kind; }
  std::string name() const { return id_.str(); }
  // The physical device this one is carved from (differs after visible-device reordering or a split).
  const DeviceId& physical_id() const noexcept { return physical_id_; }
  // Bytes of the physical memory behind this device (for a logical device: its share).
  [[nodiscard]] std::size_t capacity_bytes() const noexcept { return capacity_bytes_; }
  memory::MemoryStack& memory() const noexcept { return *memory_; }
  bool poison_freed() const noexcept { return options_.poison_freed; }
  // Whether host code may read and write this device's memory directly (cpu); otherwise only copies and
  // kernels running on its streams may (sim, cuda).
  [[nodiscard]] virtual bool host_accessible() const noexcept = 0;
  // What the host memory staging this device's copies is: "mlock" (page-locked host pages), the backend's
  // own pinned memory ("CL_MEM_ALLOC_HOST_PTR" on opencl devices), or "pageable" (unpinned: a device that
  // asked for none, or whose pinned memory was refused; copies stay correct).
  [[nodiscard]] virtual std::string staging_kind() const = 0;
  // Empty for a device that runs work. A planning-only device (make_cuda_planning_device: `tensorpool estimate
  // --devices cuda:N` on a machine without a GPU) plans steps and runs none: this says so, why, and where its
  // capacity came from, for every report that shows its figures.
  [[nodiscard]] virtual std::string planning_note() const { return {}; }
  // Memory that migrates on demand (a cuda device whose allocator is managed, on a GPU with concurrent managed
  // access): whether prefetch_step does anything here. A session asks before collecting a step's buffers, so
  // other devices cost nothing.
  [[nodiscard]] virtual bool prefetches_steps() const noexcept { return false; }
  // Enqueues on `stream` (one of this device's) the migration to this device of `buffers`, the memory a step's
  // work on it uses (its arena, the variables, feeds bound in place), ahead of the step's kernels: a hint, so
  // its failure is logged and never fails the step. Nothing by default.
  virtual void prefetch_step(Stream& stream, std::span<const std::shared_ptr<Buffer>> buffers) {
    (void)stream;
    (void)buffers;
  }

  [[nodiscard]] std::size_t num_streams() const noexcept { return streams_.size(); }
  // Throws tp::InvalidArgument naming the index and the count when out of range.
  Stream& stream(std::size_t index = 0) const;
  // Waits for every stream; rethrows the first task error any of them kept.
  void synchronize();
  // Blocks the calling host thread until `event`, recorded on one of this device's streams, has completed.
  // `later_work_queued`: work launched after the event keeps the device busy meanwhile, so the waiter's wake-up
  // is hidden behind it and the thread sleeps at once; otherwise it polls first (Event::synchronize). A backend
  // whose kernels run on the host's cores may give the waiting thread their work meanwhile (sim: the intra-op
  // pool's).
  void wait_on_host(const Event& event, bool later_work_queued) { do_wait_on_host(event, later_work_queued); }

  // A buffer of `bytes` (0 gives an empty buffer with no memory), tagged for the profiler and OOM reports.
  // When the stack is out of memory while stream work is pending, waits for that work (whose buffers then
  // return in stream order) and retries once before the tp::OutOfMemoryError propagates.
  // `through`, when given, is a resource layered over this device's memory() (a session's quota adaptor):
  // the buffer is allocated from it and returned to it, and holds it until then.
  // Without `through`, a tag whose kind memory().config().shared_kinds lists goes to shared_memory() when the
  // device has one (as allocate_shared).
  [[nodiscard]] std::shared_ptr<Buffer> allocate(std::size_t bytes, const memory::AllocationTag& tag = {},
                                                 std::shared_ptr<memory::MemoryResource> through = nullptr);

  // Shared (unified) memory: a second memory stack, reported apart from memory(), whose buffers host code and
  // this device's kernels both touch without copies (Buffer::host_visible()): fine-grained buffer SVM on
  // opencl devices that have it (named "<device>/shared"). Null on devices without it: sim and cuda-like
  // devices have none, and a host_accessible() device's memory is host memory already.
  memory::MemoryStack* shared_memory() const noexcept { return shared_memory_.get(); }
  // A host-visible buffer of `bytes`: from shared_memory() when the device has one, else from memory() on a
  // host_accessible() device. On a device with neither, the buffer comes from memory() and is not
  // host-visible (the caller checks Buffer::host_visible(); shared_memory_note() says why).
  [[nodiscard]] std::shared_ptr<Buffer> allocate_shared(std::size_t bytes, const memory::AllocationTag& tag = {});
  // One line on where this device's shared allocations go: "opencl:0/shared (fine-grained SVM): ..." or
  // "sim:0 has no shared memory: shared allocations come from its device memory".
  [[nodiscard]] std::string shared_memory_note() const;
  [[nodiscard]] std::size_t live_buffers() const noexcept { return live_buffers_.load(std::memory_order_relaxed); }

  // Compaction at a step boundary: moves `buffers` (this device's, from memory() directly or through an adaptor
  // over it, such as a session's quota adaptor) so that the memory the holes between live blocks pin goes back,
  // when the stack's allocator moves blocks (expandable; elsewhere nothing moves and the result has ran =
  // false). Other buffers stay where they are, as do empty ones and those from shared_memory(). Waits for this
  // device's streams first. The caller guarantees that nothing uses the listed buffers until it returns (its
  // work on every device is done and it launches none meanwhile) and that no one keeps their addresses from
  // data() across it: every Tensor over a moved buffer sees its new address. An allocation refused after it,
  // before any succeeds, carries the result in its report. Throws tp::InvalidArgument naming the buffer for a
  // buffer of another device, and naming the stream when called from a task of one of this device's streams.
  memory::CompactionResult compact(std::span<const std::shared_ptr<Buffer>> buffers);

  // Applies `options` to the kernels launched on this device from now on (work already enqueued keeps the
  // settings it was launched with). Throws tp::InvalidArgument naming the device, the field and the accepted
  // values for a value the backend refuses (an unknown GEMM library, a negative thread count), changing
  // nothing.
  void configure_kernels(const KernelOptions& options);
  // The float32 GEMM libraries gemm_library "auto" has chosen so far, one per shape class in the order chosen:
  // on cpu and sim devices the process's one table, which they all share; empty on other backends.
  [[nodiscard]] std::vector<GemmChoice> gemm_choices() const { return do_gemm_choices(); }
  // The paths its bfloat16 products took (GemmPathChoice), process-wide as gemm_choices; empty where the
  // device computes its own GEMMs or no bfloat16 product ran.
  [[nodiscard]] std::vector<GemmPathChoice> gemm_path_choices() const { return do_gemm_path_choices(); }
  // Does now what this device's first kernels would otherwise do inside the first step: on cpu and sim devices
  // whose GEMM library is "auto" or "onednn", oneDNN's generation of its sgemm kernels (once per process; a
  // concurrent caller waits for it). A caller with other work before its first step (reading a dataset) runs
  // that work on another thread meanwhile. Nothing elsewhere.
  void warm_up_kernels() { do_warm_up_kernels(); }

  // State that a higher layer keeps per device (the runtime's memory arbiter), created by `create` on the
  // first request for `key` and destroyed with the device. Thread-safe.
  std::shared_ptr<void> extension(const std::string& key, const std::function<std::shared_ptr<void>()>& create);

  // Enqueues on `stream` (one of this device's) a copy of `bytes` host bytes into `dst` at `dst_offset`. The
  // source is staged before this returns, so the caller may reuse `src` at once (as a pageable
  // cudaMemcpyAsync). Throws tp::InvalidArgument on a foreign stream or buffer or an out-of-range span.
  void copy_from_host(Stream& stream, const void* src, const std::shared_ptr<Buffer>& dst, std::size_t dst_offset,
                      std::size_t bytes);
  // Copies `bytes` of `src` at `src_offset` into host memory `dst`, in `stream`'s order, and returns once
  // they are there (rethrowing a kept stream error).
  void copy_to_host(Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset, void* dst,
                    std::size_t bytes);
  // The same without blocking (as cudaMemcpyAsync into pinned memory, then an event): enqueues the copy into
  // this device's staging memory and returns that memory with the event after which it holds the bytes.
  // Behind a kept stream error the copy is skipped while the event still completes: check the stream.
  // A host-visible `src` (shared memory) is not copied: the returned bytes alias it (holding the buffer) and
  // hold the value once `ready` has completed, until later work on the buffer writes it.
  [[nodiscard]] HostReadback read_to_host_async(Stream& stream, const std::shared_ptr<Buffer>& src,
                                                std::size_t src_offset, std::size_t bytes);

 protected:
  Device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes, std::unique_ptr<memory::MemoryStack> memory,
         DeviceOptions options);
  // Backends call this once from their constructor.
  void set_streams(std::vector<std::unique_ptr<Stream>> streams);
  // Backends with shared memory call this once from their constructor; `description` names its kind
  // ("fine-grained SVM") for shared_memory_note().
  void set_shared_memory(std::shared_ptr<memory::MemoryStack> stack, std::string description);
  // Backends call this first thing in their destructor: waits for all work, then joins the streams, while
  // the derived object (whose primitives the tasks call) is still alive.
  void shut_down() noexcept;
  // The buffer's address without the host-access check, for backend copy primitives that run where the check
  // cannot see (a peer copy reads one device's memory in a task of another's stream).
  static void* unchecked_address(const Buffer& buffer) noexcept;
  // wait_on_host's backend part; a backend that overrides it ends by calling this one.
  virtual void do_wait_on_host(const Event& event, bool later_work_queued);

 private:
  friend class tp::Buffer;
  friend void copy(Stream& src_stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset, Stream& dst_stream,
                   const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes,
                   SourceRelease release);
  friend std::vector<Event> copy_concurrently(std::span<const CopyRequest> copies);
  friend bool peer_accessible(const Device& from, const Device& to) noexcept;

  std::shared_ptr<Buffer> allocate_from(std::size_t bytes, const memory::AllocationTag& tag,
                                        std::shared_ptr<memory::MemoryResource> through, bool shared);
  // Called by ~Buffer only; `through` is the resource the buffer came from (null: memory()).
  void release(void* ptr, std::size_t bytes, memory::MemoryResource* through) noexcept;

  // Backend primitives. The enqueue_* ones put the copy on `stream` (of this device); `host` memory stays
  // valid until the enqueued work has run (callers capture its owner in the task).
  virtual void enqueue_to_host(Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset, void* host,
                               std::size_t bytes) = 0;
  virtual void enqueue_from_host(Stream& stream, const void* host, const std::shared_ptr<Buffer>& dst,
                                 std::size_t dst_offset, std::size_t bytes, std::shared_ptr<void> host_owner) = 0;
  virtual void enqueue_within(Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                              const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes) = 0;
  // Peer access (as CUDA's between GPUs): whether this device can copy straight into `other`'s memory with
  // one transfer on one of the two devices' streams, instead of staging through host memory.
  virtual bool peer_access(const Device& other) const noexcept { return (void)other, false; }
  // Whether this device's streams can read `source`'s memory in place (enqueue_peer from it), when nothing
  // has to wait on the source's side (SourceRelease::caller_synchronizes): wider than peer_access, whose
  // copies also make the source's stream wait, which an inline (host) stream would do by blocking.
  virtual bool reads_directly(const Device& source) const noexcept { return (void)source, false; }
  // Enqueues on `stream` (of this device or of the peer) the one-transfer copy; only when peer_access().
  virtual void enqueue_peer(Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                            const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes);
  // Host memory for staging copies (from pageable host memory, and between devices): pinned where the
  // backend has it.
  virtual std::shared_ptr<void> staging_buffer(std::size_t bytes) = 0;
  virtual void poison(void* ptr, std::size_t bytes) noexcept = 0;
  // The backend's part of configure_kernels (the base checked what every backend shares): validate every
  // field it reads, then apply. A backend without such settings ignores them.
  virtual void do_configure_kernels(const KernelOptions& options) { (void)options; }
  virtual std::vector<GemmChoice> do_gemm_choices() const { return {}; }
  virtual std::vector<GemmPathChoice> do_gemm_path_choices() const { return {}; }
  virtual void do_warm_up_kernels() {}

  const DeviceId id_;
  const DeviceId physical_id_;
  const std::size_t capacity_bytes_;
  const DeviceOptions options_;
  std::unique_ptr<memory::MemoryStack> memory_;
  std::vector<std::unique_ptr<Stream>> streams_;        // set once by the backend's constructor
  std::shared_ptr<memory::MemoryStack> shared_memory_;  // set at most once by the backend's constructor
  std::string shared_description_;
  std::atomic<std::size_t> live_buffers_{0};
  std::mutex extensions_mutex_;  // guards extensions_
  std::map<std::string, std::shared_ptr<void>, std::less<>> extensions_;
};

// Copies `bytes` from `src` (on src_stream's device) to `dst` (on dst_stream's device) in stream order on
// both sides: the destination's work after this call sees the bytes; the source buffer is not reused before
// the copy has read it. Between two devices with peer access (sim devices of one process) it is one transfer
// on the destination's stream, after the source's earlier work, and the source's later work waits for it;
// between other devices the bytes go through the source device's staging memory. With
// SourceRelease::caller_synchronizes, a destination that reads the source in place (reads_directly: a sim
// device reading host memory) takes the one-transfer path too, and nothing waits on the source's side.
void copy(Stream& src_stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset, Stream& dst_stream,
          const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes,
          SourceRelease release = SourceRelease::wait_for_read);

struct CopyRequest {
  Stream* src_stream = nullptr;
  std::shared_ptr<Buffer> src;
  std::size_t src_offset = 0;
  Stream* dst_stream = nullptr;
  std::shared_ptr<Buffer> dst;
  std::size_t dst_offset = 0;
  std::size_t bytes = 0;
};

// Copies that may run at the same time (one step of a ring collective), each with copy()'s guarantees. Calling
// copy() one after another would chain them between peers: each source's stream waits for its copy, so the
// next copy, recorded after that wait, waits too. Here every source's position is taken before any copy is
// enqueued, and the sources' streams wait for their copies only once all are enqueued. Pairs without peer
// access go through copy(). Returns, per copy, an event that completes once the bytes have arrived.
std::vector<Event> copy_concurrently(std::span<const CopyRequest> copies);

// Whether work on `to`'s streams may read and write `from`'s memory directly (peer access: sim devices of one
// process).
[[nodiscard]] bool peer_accessible(const Device& from, const Device& to) noexcept;

// Inside a task of a stream of device D, lets the code touch (read and write) the memory of `peer`
// (Buffer::data) when peer_accessible(peer, D), for the scope's lifetime on this thread: a kernel that reads a
// neighbour's buffer in place, or the direct all-reduce that stores its chunk's sum into every participant.
// Ordering with the peer's streams stays the enqueuer's job.
class PeerAccessScope {
 public:
  explicit PeerAccessScope(const Device& peer) noexcept;
  ~PeerAccessScope();
  PeerAccessScope(const PeerAccessScope&) = delete;
  PeerAccessScope& operator=(const PeerAccessScope&) = delete;
  // The peer the current thread may touch, or null.
  static const Device* current() noexcept;

 private:
  const Device* outer_;
};

}  // namespace tp::device

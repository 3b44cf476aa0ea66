// SPDX-License-Identifier: Apache-2.0
#pragma once
// CudaStream: a stream of a cuda device, served by one CUDA stream (cudaStreamNonBlocking) and a worker thread
// that enqueues on it.
//
// - A command task (enqueue_commands: a kernel launch, a cuBLASLt call, a copy) runs on the worker, with the
//   stream's CUDA device current (cudaSetDevice) and Stream::current() == this (so Tensor::data() gives device
//   addresses), and enqueues asynchronous work on native() without waiting for it. Its captures (buffers,
//   staging blocks) are kept until that work has completed (an event recorded behind it), so a buffer the host
//   dropped returns to the allocator only after the kernels that use it ran: stream-ordered reuse.
// - A host task (Stream::enqueue) runs on the worker once every earlier command has completed: the worker
//   waits for the device there, so the training step's kernels enqueue none (a result the host must check,
//   such as the label check's status, goes through after_completion instead).
// - record() records a cudaEvent_t; wait(event) on an event of a cuda stream is cudaStreamWaitEvent (no thread
//   blocks); any other event blocks the worker.
// - Errors: an exception from a command task, or a failed CUDA call on the stream, is kept as the stream's
//   error (Stream::keep_error); synchronize() rethrows it.

#include <cuda_runtime_api.h>

#include <functional>

#include "tensorpool/device/stream.hpp"

namespace tp::backend::cuda {

class CudaStream : public device::Stream {
 public:
  using Commands = std::function<void()>;

  // The CUDA stream the commands enqueue on.
  [[nodiscard]] virtual cudaStream_t native() const noexcept = 0;
  // The CUDA device ordinal of this stream's (physical) device.
  [[nodiscard]] virtual int ordinal() const noexcept = 0;
  // Enqueues `commands` behind everything enqueued before; skipped (not run) behind a kept error.
  virtual void enqueue_commands(Commands commands) = 0;
  // As enqueue_commands, for a command task that must not be captured into a CUDA graph (set_graph_capture):
  // one that synchronizes with other threads or streams as it runs (a collective whose participants arrive
  // from several workers), or must run exactly once on the host. It ends the open segment, whose graph is
  // launched before it, and runs eagerly: no refused capture, no rerun, no count against the failure limit.
  virtual void enqueue_eager_commands(Commands commands) = 0;
  // Inside a command task of this stream only (on its worker; throws tp::DeviceError elsewhere): `check` runs
  // on the stream's completer once the device has run everything the task enqueued (after its event
  // completed, before its captures go), and the worker does not wait for it. An exception from `check` becomes
  // the stream's error (synchronize() rethrows it; work the worker enqueued meanwhile has run). Not run when the
  // stream already failed (the device's results may be missing); destroyed on the completer either way.
  virtual void after_completion(Commands check) = 0;
  // Captures runs of consecutive command tasks into CUDA graphs (on) or launches each call as it comes
  // (off, the default); takes effect from the next segment. Results are the same either way (docs/cuda.md,
  // "CUDA graphs"). Any thread.
  virtual void set_graph_capture(bool on) noexcept = 0;

 protected:
  using device::Stream::Stream;
};

// `stream` as the CudaStream it is; throws tp::DeviceError naming the stream when it is not one.
CudaStream& cuda_stream(device::Stream& stream);

}  // namespace tp::backend::cuda

// SPDX-License-Identifier: Apache-2.0
// CudaStreamImpl's graph capture (cuda_stream_impl.hpp states the contract; docs/cuda.md, "CUDA graphs"): with
// capture on, the worker captures each run of consecutive command tasks (a segment) into a CUDA graph
// instead of launching its work one call at a time, then launches the graph once.
//
// Correct by construction: a segment's graph is captured afresh from the very calls its tasks made, so what
// runs is what eager execution would have enqueued, in the same order, with this step's arguments (an Adam
// step count, a staging block's address). The executable of an earlier segment of the same shape is only
// brought up to date with the new graph (cudaGraphExecUpdate), and a refused update instantiates afresh. What
// a graph saves: the per-call launch latency on the worker (capture records, it does not submit), one event
// and one completer wake-up per task, and the device's gaps between kernels.
//
// Fallback: when CUDA refuses the capture (a task made a call that cannot be captured; the task throws, as
// every checked CUDA call does) or the graph's instantiation or launch, nothing of the segment has run on the
// device, so its tasks run again eagerly, in order: a genuine error of a task is then raised and kept exactly
// as without capture. After CaptureFailures::kLimit such failures the stream stops capturing, logged once.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_stream_impl.hpp"
#include "tensorpool/core/log.hpp"

namespace tp::backend::cuda {

void CudaStreamImpl::set_graph_capture(bool on) noexcept { graph_capture_.store(on, std::memory_order_relaxed); }

bool CudaStreamImpl::capture_commands(Item& item) {
  if (!capturing_) {
    if (!graph_capture_.load(std::memory_order_relaxed) || capture_failures_.capture_off() || failed()) return false;
    wait_for_outstanding_below(max_in_flight_);
    (void)cudaGetLastError();  // as before any task: nothing an earlier call left is blamed on the capture
    // Thread-local mode: only this worker's calls are checked against the capture; the completer keeps
    // synchronizing events recorded before it, other streams' workers keep waiting on them.
    const cudaError_t began = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
    if (began != cudaSuccess) {
      (void)cudaGetLastError();
      capture_failed("cudaStreamBeginCapture", began);
      return false;
    }
    capturing_ = true;
  }
  (void)cudaGetLastError();
  bool threw = false;
  {
    Task body = [&item] { item.task(); };
    try {
      run(body, /*propagate=*/true);
    } catch (...) {
      threw = true;  // the eager rerun raises it again if it is the task's own error
    }
  }
  segment_.push_back(std::move(item.task));
  segment_checks_.insert(segment_checks_.end(), std::make_move_iterator(checks_.begin()),
                         std::make_move_iterator(checks_.end()));
  checks_.clear();
  if (threw) {
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    capturing_ = false;
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    capture_failed("a command task during capture", ended);
    rerun_segment_eagerly();
  }
  return true;
}

void CudaStreamImpl::flush_segment() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    capture_failed("cudaStreamEndCapture", ended);
    rerun_segment_eagerly();
    return;
  }
  if (failed()) {  // the completer kept an error meanwhile: eager execution skips these tasks, so does this
    (void)cudaGraphDestroy(graph);
    rerun_segment_eagerly();
    return;
  }
  const std::optional<cudaGraphExec_t> exec = executable_of(graph);
  (void)cudaGraphDestroy(graph);  // the executable holds what it needs
  if (!exec.has_value()) {
    rerun_segment_eagerly();
    return;
  }
  const cudaError_t launched = cudaGraphLaunch(*exec, stream_);
  if (launched != cudaSuccess) {  // nothing of the graph was enqueued
    (void)cudaGetLastError();
    capture_failed("cudaGraphLaunch", launched);
    rerun_segment_eagerly();
    return;
  }
  graph_launches_.fetch_add(1, std::memory_order_relaxed);
  hand_over_segment();
}

std::optional<cudaGraphExec_t> CudaStreamImpl::executable_of(cudaGraph_t graph) {
  std::size_t nodes = 0;
  cudaError_t status = cudaGraphGetNodes(graph, nullptr, &nodes);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    capture_failed("cudaGraphGetNodes", status);
    return std::nullopt;
  }
  const SegmentShape shape{.tasks = segment_.size(), .nodes = nodes};
  if (const std::optional<cudaGraphExec_t> held = execs_.find(shape)) {
    // Updates apply to later launches only; launches of it already enqueued run as they were.
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(*held, graph, &info) == cudaSuccess) return held;
    (void)cudaGetLastError();  // another launch sequence of the same shape: instantiated afresh below
    execs_.erase(shape);       // an executable still in flight is freed once it has run
  }
  cudaGraphExec_t exec = nullptr;
  status = cudaGraphInstantiate(&exec, graph, 0);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    capture_failed("cudaGraphInstantiate", status);
    return std::nullopt;
  }
  execs_.insert(shape, exec);
  return exec;
}

void CudaStreamImpl::rerun_segment_eagerly() {
  std::vector<Task> tasks = std::exchange(segment_, {});
  segment_checks_.clear();  // the rerun registers its checks again
  eager_reruns_.fetch_add(1, std::memory_order_relaxed);
  for (Task& task : tasks) run_commands(task);
}

void CudaStreamImpl::hand_over_segment() {
  std::vector<Task> tasks = std::exchange(segment_, {});
  const std::size_t count = tasks.size();
  // One event behind the graph; its entry holds every task's captures and checks. The other tasks' entries
  // have nothing to wait for and retire right after it, in order: each enqueued item still completes once.
  checks_ = std::exchange(segment_checks_, {});
  mark([held = std::move(tasks)] {}, std::nullopt);
  for (std::size_t k = 1; k < count; ++k) hand_over(Entry{});
}

void CudaStreamImpl::capture_failed(const char* call, cudaError_t status) noexcept {
  if (!capture_failures_.count()) return;
  try {
    TP_LOG(warning, "cuda", name(), ": CUDA graph capture is off for this stream after ", CaptureFailures::kLimit,
           " failures (the last: ", call, ": ", cudaGetErrorName(status),
           "); its commands run eagerly, with the same results");
  } catch (...) {  // logging is best effort
  }
}

}  // namespace tp::backend::cuda

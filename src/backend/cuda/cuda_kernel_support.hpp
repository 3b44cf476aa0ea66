// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the CUDA kernel adapters (cuda_kernels_*.cpp, cuda_matmul.cpp) share: the dtype mapping onto the
// launch functions' kernels::Dtype, enqueueing a command on a CudaStream, the launch status check, and each
// CUDA stream's scratch: a small device status word with its pinned host mirror (the label check's result)
// and cuBLASLt's workspace.
//
// The adapters run on the op's thread: they capture the Args by value (the Tensor handles keep the buffers
// alive until the stream's work has completed) and enqueue a command; the command runs on the stream's worker
// with the device current and Stream::current() set, takes tensor.data() (device addresses) and calls the
// launch functions on native(), which only enqueue.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda/kernels/launch.cuh"
#include "tensorpool/core/dtype.hpp"
#include "tensorpool/core/tensor.hpp"

namespace tp::backend::cuda::support {

inline constexpr std::string_view kComponent = "cuda";

// `dtype` as the launch functions name it.
[[nodiscard]] kernels::Dtype kernel_dtype(DType dtype) noexcept;

// Throws tp::DeviceError "<kernel> failed: <cudaGetErrorName> ..." unless `status` is cudaSuccess.
void check_launch(cudaError_t status, std::string_view kernel);

// Enqueues body(cudaStream_t) as a command of `stream` (a stream of a cuda device).
template <typename Body>
void enqueue(device::Stream& stream, Body body) {
  CudaStream& cuda = cuda_stream(stream);
  cuda.enqueue_commands([&cuda, body = std::move(body)]() { body(cuda.native()); });
}

// A tensor's device address, or null for an undefined tensor. Inside a command only.
[[nodiscard]] inline void* address(const Tensor& tensor) { return tensor.defined() ? tensor.data() : nullptr; }

// The device address of a tensor that may live on a peer of the command's device (an op checked
// device::peer_accessible): taken under a device::PeerAccessScope of its device, as the CPU kernels read a
// peer's buffer in place. The kernels reach it through unified addressing (the peers' access is enabled by
// the device). Inside a command only.
[[nodiscard]] void* peer_address(const Tensor& tensor);

// The element count as the launch functions take it.
[[nodiscard]] inline std::int64_t elements(const Tensor& tensor) { return tensor.num_elements(); }

// Per CUDA stream (keyed by its cudaStream_t and device ordinal), allocated on first use outside the memory
// stack (cudaMalloc / cudaHostAlloc, a few bytes, plus cuBLASLt's workspace when a product runs) and kept for
// the process's lifetime: a stream handle the driver hands out again reuses its predecessor's scratch.
struct StreamScratch {
  std::int64_t* status_device = nullptr;  // 2 words: launch_check_labels' (row, label), rewritten by each launch
  void* workspace = nullptr;              // cuBLASLt's, kMatmulWorkspaceBytes (null until the first product)
  // Pinned 2-word slots, each the host copy of one label check's status from its copy until the completer
  // read it: checks in flight at once never share one. Taken by the worker, returned by the completer.
  std::mutex slots_mutex;
  std::vector<std::int64_t*> free_slots;  // guarded by slots_mutex; capacity >= slot_count
  std::size_t slot_count = 0;             // slots allocated; guarded by slots_mutex
};
// Inside a command of `stream` (its device current). Throws tp::DeviceError on a refused allocation.
StreamScratch& scratch_of(const CudaStream& stream);
// The workspace of `scratch`, allocated on first use.
void* matmul_workspace(StreamScratch& scratch);

// cuBLASLt's workspace per stream: 32 MiB, as PyTorch's default for Hopper: room for the split-K and
// stream-K algorithms of the larger products. Allocated with cudaMalloc outside the memory stack, so it is
// not in the planner's figures; the device's free memory is that much smaller per stream that multiplies.
inline constexpr std::size_t kMatmulWorkspaceBytes = std::size_t{32} << 20;

// Inside a command of `stream` (`native` its CUDA stream), before the kernel that reads `labels`: enqueues
// launch_check_labels and the copy of its status into a pinned slot, and registers an after_completion check
// that throws tp::InvalidArgument (the stream's error, reported at the next synchronize) naming `op`, the first
// bad row and its label when a label lies outside [0, cols): the CPU kernels' refusal, found on the device.
// Nothing waits for the device here: the completer reads the slot once the command's work has completed (the
// kernels behind it give a bad row NaN and never index outside it).
void check_labels(CudaStream& stream, cudaStream_t native, std::string_view op, const Tensor& labels, std::int64_t rows,
                  std::int64_t cols);

}  // namespace tp::backend::cuda::support

// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/cuda_kernel_support.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "backend/cuda/cuda_error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda::support {

kernels::Dtype kernel_dtype(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return kernels::Dtype::f32;
    case DType::f64: return kernels::Dtype::f64;
    case DType::f16: return kernels::Dtype::f16;
    case DType::bf16: return kernels::Dtype::bf16;
    case DType::i32: return kernels::Dtype::i32;
    case DType::i64: return kernels::Dtype::i64;
    case DType::u8: return kernels::Dtype::u8;
    case DType::boolean: return kernels::Dtype::boolean;
  }
  return kernels::Dtype::f32;  // not reached: every DType is listed
}

void check_launch(cudaError_t status, std::string_view kernel) { check(status, kernel); }

void* peer_address(const Tensor& tensor) {
  if (!tensor.defined()) return nullptr;
  // On the command's own device the scope changes nothing: Buffer::data() accepts its own stream's device.
  const device::PeerAccessScope peer(tensor.device());
  return tensor.data();
}

namespace {

struct ScratchRegistry {
  std::mutex mutex;
  std::map<std::pair<cudaStream_t, int>, std::unique_ptr<StreamScratch>> scratch;  // guarded by mutex
};

ScratchRegistry& registry() {
  static ScratchRegistry instance;  // never destroyed before the streams that use it: leaked with the process
  return instance;
}

}  // namespace

StreamScratch& scratch_of(const CudaStream& stream) {
  ScratchRegistry& all = registry();
  const std::lock_guard lock(all.mutex);
  std::unique_ptr<StreamScratch>& entry = all.scratch[{stream.native(), stream.ordinal()}];
  if (entry == nullptr) {
    auto fresh = std::make_unique<StreamScratch>();
    void* device_words = nullptr;
    check(cudaMalloc(&device_words, 2 * sizeof(std::int64_t)), "cudaMalloc (status word)");
    void* host_words = nullptr;
    const cudaError_t status = cudaHostAlloc(&host_words, 2 * sizeof(std::int64_t), cudaHostAllocPortable);
    if (status != cudaSuccess) {
      (void)cudaFree(device_words);
      check(status, "cudaHostAlloc (status word)");
    }
    fresh->status_device = static_cast<std::int64_t*>(device_words);
    fresh->status_host = static_cast<std::int64_t*>(host_words);
    entry = std::move(fresh);
  }
  return *entry;
}

void* matmul_workspace(StreamScratch& scratch) {
  // Only the stream's own worker touches its scratch's workspace: no lock needed past scratch_of's.
  if (scratch.workspace == nullptr) {
    check(cudaMalloc(&scratch.workspace, kMatmulWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
  }
  return scratch.workspace;
}

void check_labels(device::Stream& stream, std::string_view op, const Tensor& labels, std::int64_t rows,
                  std::int64_t cols) {
  if (rows == 0) return;
  CudaStream& cuda = cuda_stream(stream);
  // Filled by the command, read by the host task behind it on the same worker (nothing runs in between).
  auto result = std::make_shared<StreamScratch*>(nullptr);
  enqueue(stream, [labels, rows, cols, result, &cuda](cudaStream_t native) {
    StreamScratch& scratch = scratch_of(cuda);
    *result = &scratch;
    check_launch(kernels::launch_check_labels(labels.data(), labels.dtype() == DType::i64, rows, cols,
                                              scratch.status_device, native),
                 "launch_check_labels");
    check(cudaMemcpyAsync(scratch.status_host, scratch.status_device, 2 * sizeof(std::int64_t),
                          cudaMemcpyDeviceToHost, native),
          "cudaMemcpyAsync (label check)");
  });
  stream.enqueue([result, op = std::string(op), cols] {
    if (*result == nullptr) return;  // the command was skipped behind an earlier error
    const std::int64_t row = (*result)->status_host[0];
    const std::int64_t label = (*result)->status_host[1];
    if (row < 0) return;
    TP_THROW(InvalidArgument, kComponent, op, ": row ", row, " has label ", label,
             ", outside the valid class range [0, ", cols, ") for ", cols, " classes");
  });
}

}  // namespace tp::backend::cuda::support

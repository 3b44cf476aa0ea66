// SPDX-License-Identifier: Apache-2.0
#pragma once
// CudaDevice: a device on one CUDA GPU (physical, or a logical share of one). Its memory stack comes from the
// CUDA memory sources (cuda_memory.hpp); each of its streams is a CudaStreamImpl with a CUDA stream of its own
// (cuda_stream_impl.hpp). Kernels, cuBLASLt calls and copies are command tasks: they enqueue on the stream's
// CUDA stream without waiting, and the event behind them keeps their captures (buffers, staging blocks) until
// they have run, so a buffer is released only once its work has completed (stream-ordered reuse).
//
// Copies are cudaMemcpyAsync on the stream (cudaMemcpyDefault: unified addressing tells host from device and
// which device), staged through the device's StagingPool over page-locked cudaHostAlloc memory, so a copy to
// or from the host is a DMA transfer that does not block the worker. A copy within one buffer whose ranges
// overlap goes through staging (cudaMemcpy's ranges must not overlap). The debug poison is a cudaMemsetAsync on
// a service stream, waited for (buffers are released from whichever thread drops them, after their work).
//
// Peer access: logical devices on one GPU share its memory (one address space, one primary context), so they
// are always peers: their kernels read each other's buffers in place. Devices on two GPUs are peers when
// cudaDeviceCanAccessPeer says both reach the other; the first question enables it both ways
// (cudaDeviceEnablePeerAccess), once per pair in the process.

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "device/staging_pool.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::cuda {

class CudaDevice final : public device::Device {
 public:
  // A device on CUDA device `ordinal` with `memory` (a stack over that GPU's memory).
  CudaDevice(device::DeviceId id, device::DeviceId physical_id, std::size_t capacity_bytes,
             std::unique_ptr<memory::MemoryStack> memory, int ordinal, const device::DeviceOptions& options);
  ~CudaDevice() override;

  bool host_accessible() const noexcept override { return false; }
  std::string staging_kind() const override { return staging_->kind(); }
  // The CUDA device ordinal of the GPU behind this device.
  int ordinal() const noexcept { return ordinal_; }
  const device::StagingPool& staging() const noexcept { return *staging_; }
  // Managed memory (allocator managed) on a GPU with concurrent managed access: a step's buffers are prefetched
  // to the GPU (cudaMemPrefetchAsync on the step's stream) before its kernels, so pages migrate in bulk ahead
  // of them instead of faulting in one by one (after the host touched them, or evicted under
  // oversubscription). A refused prefetch is logged once and the step runs on (pages then fault in).
  bool prefetches_steps() const noexcept override { return prefetches_steps_; }
  void prefetch_step(device::Stream& stream, std::span<const std::shared_ptr<Buffer>> buffers) override;

 private:
  void enqueue_to_host(device::Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset, void* host,
                       std::size_t bytes) override;
  void enqueue_from_host(device::Stream& stream, const void* host, const std::shared_ptr<Buffer>& dst,
                         std::size_t dst_offset, std::size_t bytes, std::shared_ptr<void> host_owner) override;
  void enqueue_within(device::Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                      const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes) override;
  bool peer_access(const device::Device& other) const noexcept override;
  void enqueue_peer(device::Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                    const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes) override;
  std::shared_ptr<void> staging_buffer(std::size_t bytes) override { return staging_->acquire(bytes); }
  void poison(void* ptr, std::size_t bytes) noexcept override;
  // The address of `offset` in `buffer`: a device address (unified addressing), for work enqueued on a CUDA
  // stream only, never touched by host code.
  static char* address(const std::shared_ptr<Buffer>& buffer, std::size_t offset) noexcept;

  // Immutable after construction.
  const int ordinal_;
  const bool prefetches_steps_;
  std::shared_ptr<device::StagingPool> staging_;
  cudaStream_t service_stream_ = nullptr;  // poison fills
  std::once_flag prefetch_warned_;         // prefetch_step's failure is logged once
};

}  // namespace tp::backend::cuda

// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/cuda_device.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_error.hpp"
#include "backend/cuda/cuda_kernel_table.hpp"
#include "backend/cuda/cuda_memory.hpp"
#include "backend/cuda/cuda_memory_sources.hpp"
#include "backend/cuda/cuda_stream_impl.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/device/backends.hpp"

namespace tp::backend::cuda {
namespace {

// Enables access from GPU `from` to GPU `to`'s memory; true when it is (or already was) enabled.
bool enable_peer_access(int from, int to) {
  const ScopedDevice scoped(from);
  const cudaError_t status = cudaDeviceEnablePeerAccess(to, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // not an error here: clear the thread's last error
    return true;
  }
  check(status, "cudaDeviceEnablePeerAccess(" + std::to_string(from) + " -> " + std::to_string(to) + ")");
  return true;
}

// Whether GPUs `a` and `b` (distinct) reach each other's memory, both ways; enabled at the first question,
// once per pair for the process (peer access belongs to the primary contexts, which every device on a GPU
// shares).
bool gpus_are_peers(int a, int b) noexcept {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, bool> known;  // guarded by mutex; keyed (smaller, larger)
  const std::pair<int, int> key{std::min(a, b), std::max(a, b)};
  const std::lock_guard lock(mutex);
  const auto found = known.find(key);
  if (found != known.end()) return found->second;
  bool peers = false;
  try {
    int forward = 0;
    int backward = 0;
    check(cudaDeviceCanAccessPeer(&forward, a, b), "cudaDeviceCanAccessPeer");
    check(cudaDeviceCanAccessPeer(&backward, b, a), "cudaDeviceCanAccessPeer");
    peers = forward != 0 && backward != 0 && enable_peer_access(a, b) && enable_peer_access(b, a);
  } catch (const std::exception& error) {
    TP_LOG(warning, "cuda", "peer access between CUDA devices ", a, " and ", b,
           " is not available; copies between them go through host memory: ", error.what());
    peers = false;
  }
  known.emplace(key, peers);
  return peers;
}

// Whether a device with `memory` on GPU `ordinal` prefetches its steps: managed memory, on a GPU where the
// driver migrates pages while kernels run (cudaDevAttrConcurrentManagedAccess; without it, managed memory is
// moved whole at each launch and a prefetch has nothing to add).
bool prefetches_managed_steps(const memory::MemoryStack& memory, int ordinal) {
  if (memory.config().allocator != memory::AllocatorKind::managed) return false;
  int concurrent = 0;
  check(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, ordinal),
        "cudaDeviceGetAttribute(cudaDevAttrConcurrentManagedAccess)");
  return concurrent != 0;
}

cudaStream_t create_service_stream(int ordinal) {
  const ScopedDevice scoped(ordinal);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags (service stream)");
  return stream;
}

}  // namespace

CudaDevice::CudaDevice(device::DeviceId id, device::DeviceId physical_id, std::size_t capacity_bytes,
                       std::unique_ptr<memory::MemoryStack> memory, int ordinal, const device::DeviceOptions& options)
    : Device(id, physical_id, capacity_bytes, std::move(memory), options),
      ordinal_(ordinal),
      prefetches_steps_(prefetches_managed_steps(Device::memory(), ordinal)),
      staging_(device::StagingPool::create(id.str(), "cudaHostAlloc", [] { return make_cuda_pinned_host_resource(); })),
      service_stream_(create_service_stream(ordinal)) {
  std::vector<std::unique_ptr<device::Stream>> streams;
  try {
    for (std::size_t index = 0; index < options.num_streams; ++index) {
      streams.push_back(std::make_unique<CudaStreamImpl>(*this, index, ordinal_));
    }
  } catch (...) {
    streams.clear();
    const ScopedDevice scoped(ordinal_);
    report_teardown_failure(cudaStreamDestroy(service_stream_), "cudaStreamDestroy (service stream)");
    throw;
  }
  set_streams(std::move(streams));
}

CudaDevice::~CudaDevice() {
  shut_down();
  const ScopedDevice scoped(ordinal_, std::nothrow);  // reports a failure, unless the process is exiting
  if (scoped.ok()) report_teardown_failure(cudaStreamDestroy(service_stream_), "cudaStreamDestroy (service stream)");
}

void CudaDevice::enqueue_to_host(device::Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                                 void* host, std::size_t bytes) {
  // Non-blocking: `host` (staging memory) stays valid until the stream's event behind the copy.
  CudaStream& cuda = cuda_stream(stream);
  cuda.enqueue_commands([&cuda, src, src_offset, host, bytes] {
    check(cudaMemcpyAsync(host, address(src, src_offset), bytes, cudaMemcpyDefault, cuda.native()),
          "cudaMemcpyAsync (device to host)");
  });
}

void CudaDevice::enqueue_from_host(device::Stream& stream, const void* host, const std::shared_ptr<Buffer>& dst,
                                   std::size_t dst_offset, std::size_t bytes, std::shared_ptr<void> host_owner) {
  // Non-blocking: `owner` (the staging block) is a capture, kept until the copy has run.
  CudaStream& cuda = cuda_stream(stream);
  cuda.enqueue_commands([&cuda, host, dst, dst_offset, bytes, owner = std::move(host_owner)] {
    check(cudaMemcpyAsync(address(dst, dst_offset), host, bytes, cudaMemcpyDefault, cuda.native()),
          "cudaMemcpyAsync (host to device)");
  });
}

void CudaDevice::enqueue_within(device::Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                                const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes) {
  // Distinct buffers never share bytes, so only a copy within one buffer can overlap; cudaMemcpy's ranges must
  // not, so such a copy goes through host staging, held by the task until both halves have run.
  const bool overlap = src == dst && src_offset < dst_offset + bytes && dst_offset < src_offset + bytes;
  std::shared_ptr<void> staged = overlap ? staging_->acquire(bytes) : nullptr;
  CudaStream& cuda = cuda_stream(stream);
  cuda.enqueue_commands([&cuda, src, src_offset, dst, dst_offset, bytes, staged = std::move(staged)] {
    if (staged != nullptr) {  // the stream runs the second copy after the first
      check(cudaMemcpyAsync(staged.get(), address(src, src_offset), bytes, cudaMemcpyDefault, cuda.native()),
            "cudaMemcpyAsync (device to staging)");
      check(cudaMemcpyAsync(address(dst, dst_offset), staged.get(), bytes, cudaMemcpyDefault, cuda.native()),
            "cudaMemcpyAsync (staging to device)");
      return;
    }
    check(cudaMemcpyAsync(address(dst, dst_offset), address(src, src_offset), bytes, cudaMemcpyDefault, cuda.native()),
          "cudaMemcpyAsync (within a device)");
  });
}

void CudaDevice::prefetch_step(device::Stream& stream, std::span<const std::shared_ptr<Buffer>> buffers) {
  if (!prefetches_steps_ || buffers.empty()) return;
  // The buffers are captures: none is released before the prefetch enqueued on the stream has run.
  std::vector<std::shared_ptr<Buffer>> held(buffers.begin(), buffers.end());
  CudaStream& cuda = cuda_stream(stream);
  cuda.enqueue_commands([this, &cuda, held = std::move(held)] {
    // Inside a CUDA graph capture (CudaStream::set_graphs) the prefetch is left out: a hint, not the step's work.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(cuda.native(), &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone) {
      (void)cudaGetLastError();
      return;
    }
    for (const std::shared_ptr<Buffer>& buffer : held) {
      try {
        prefetch(address(buffer, 0), buffer->bytes(), ordinal_, cuda.native());
      } catch (const DeviceError& error) {  // a hint: the kernels fault the pages in instead
        (void)cudaGetLastError();
        std::call_once(prefetch_warned_, [&] {
          TP_LOG(warning, "cuda", name(),
                 ": prefetching a step's managed memory failed; its pages fault in: ", error.what());
        });
        return;
      }
    }
  });
}

char* CudaDevice::address(const std::shared_ptr<Buffer>& buffer, std::size_t offset) noexcept {
  return static_cast<char*>(unchecked_address(*buffer)) + offset;
}

bool CudaDevice::peer_access(const device::Device& other) const noexcept {
  const auto* peer = dynamic_cast<const CudaDevice*>(&other);
  if (peer == nullptr) return false;
  return peer->ordinal_ == ordinal_ || gpus_are_peers(ordinal_, peer->ordinal_);
}

void CudaDevice::enqueue_peer(device::Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                              const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes) {
  // One transfer on `stream` (of either device): unified addressing finds both GPUs, and the copy goes over
  // the peer link (or within the GPU for two logical devices of it).
  CudaStream& cuda = cuda_stream(stream);
  cuda.enqueue_commands([&cuda, src, src_offset, dst, dst_offset, bytes] {
    check(cudaMemcpyAsync(address(dst, dst_offset), address(src, src_offset), bytes, cudaMemcpyDefault, cuda.native()),
          "cudaMemcpyAsync (peer)");
  });
}

void CudaDevice::poison(void* ptr, std::size_t bytes) noexcept {
  // Only with poisoning on (a debugging aid): the fill completes before the memory can be handed out again, so
  // the service stream is synchronized per freed buffer. A buffer freed while the process exits needs none.
  const ScopedDevice scoped(ordinal_, std::nothrow);
  if (!scoped.ok()) return;
  const cudaError_t filled = cudaMemsetAsync(ptr, device::kPoisonByte, bytes, service_stream_);
  report_teardown_failure(filled, "cudaMemsetAsync (poisoning a freed buffer)");
  if (filled == cudaSuccess) {
    report_teardown_failure(cudaStreamSynchronize(service_stream_), "cudaStreamSynchronize (after the poison fill)");
  }
}

}  // namespace tp::backend::cuda

namespace tp::device {

std::unique_ptr<Device> make_cuda_device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
                                         const memory::MemoryConfig& config, const DeviceOptions& options) {
  const std::vector<CudaProperties>& found = cuda_physical_devices();
  if (physical_id.kind != DeviceKind::cuda || physical_id.index < 0 ||
      static_cast<std::size_t>(physical_id.index) >= found.size()) {
    TP_THROW(DeviceError, "cuda", "cannot create ", id.str(), ": physical device ", physical_id.str(),
             " is not a CUDA device of this process; there are ", found.size(),
             found.empty() ? " (" + cuda_unavailable_reason() + ")" : std::string());
  }
  const int ordinal = found[static_cast<std::size_t>(physical_id.index)].ordinal;
  ops::kernels::register_kernels(DeviceKind::cuda, backend::cuda::cuda_kernel_table());
  auto memory = backend::cuda::make_cuda_memory_stack(config, capacity_bytes, ordinal);
  return std::make_unique<backend::cuda::CudaDevice>(id, physical_id, capacity_bytes, std::move(memory), ordinal,
                                                     options);
}

}  // namespace tp::device

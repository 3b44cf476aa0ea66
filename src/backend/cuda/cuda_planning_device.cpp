// SPDX-License-Identifier: Apache-2.0
// A planning-only cuda device (backends.hpp, make_cuda_planning_device): what `tensorpool estimate` plans for
// on a machine without a GPU. The plan of a step depends on the device only through what planning reads: its
// kind (the cuda kernel table, registered here as a real cuda device registers it), that host code cannot touch
// its memory, that it has no shared memory, and its MemoryConfig and limit (the allocator the estimate replays
// the allocations on, and for `system` its source's 256-byte unit). This device has exactly those, over a
// source that allocates nothing (simulated pages, reserved and never touched, for the expandable arena). It
// runs nothing: every stream task, copy, staging request and allocation throws tp::DeviceError naming the
// device and why, so no simulated figure can pass for a GPU's.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_kernel_table.hpp"
#include "backend/cuda/cuda_memory_sources.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"

namespace tp::backend::cuda {
namespace {

[[noreturn]] void refuse(const device::Device& device, const char* what) {
  TP_THROW(DeviceError, "cuda", device.name(), " is a planning-only device (", device.planning_note(),
           "): it plans steps and runs none, so it cannot ", what, "; run on a machine with a GPU");
}

// The planning device's memory source for every allocator but expandable: it serves nothing (the device runs
// nothing) and reports to planning what a cuda device's region source reports: cudaMalloc's 256-byte unit,
// to which the estimate rounds each request of the system allocator, and the capacity.
class PlanningSource final : public memory::MemoryResource {
 public:
  PlanningSource(std::string name, std::size_t capacity_bytes)
      : MemoryResource(std::move(name)), capacity_bytes_(capacity_bytes) {}
  std::size_t max_alignment() const noexcept override { return kCudaMallocAlignment; }
  std::size_t allocation_granularity() const noexcept override { return kCudaMallocAlignment; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t /*alignment*/, const memory::AllocationTag& /*tag*/) override {
    TP_THROW(DeviceError, "cuda", name(), " is a planning-only device: it allocates nothing (", bytes,
             " bytes asked); run on a machine with a GPU");
  }
  void do_deallocate(void* /*ptr*/, std::size_t /*bytes*/) noexcept override {}
  memory::MemoryStats do_stats() const override {
    memory::MemoryStats stats;
    stats.bytes_limit = capacity_bytes_;
    return stats;
  }

  const std::size_t capacity_bytes_;
};

class PlanningStream final : public device::Stream {
 public:
  PlanningStream(device::Device& device, std::size_t index) : Stream(device, index) {}

 private:
  void wait_idle() override {}
  void do_enqueue(Task task) override {
    (void)task;
    refuse(device(), "run a kernel or a copy");
  }
  bool do_idle() const override { return true; }
};

class CudaPlanningDevice final : public device::Device {
 public:
  CudaPlanningDevice(device::DeviceId id, std::size_t capacity_bytes, std::unique_ptr<memory::MemoryStack> memory,
                     const device::DeviceOptions& options, std::string note)
      : Device(id, id, capacity_bytes, std::move(memory), options), note_(std::move(note)) {
    std::vector<std::unique_ptr<device::Stream>> streams;
    for (std::size_t index = 0; index < options.num_streams; ++index) {
      streams.push_back(std::make_unique<PlanningStream>(*this, index));
    }
    set_streams(std::move(streams));
  }
  ~CudaPlanningDevice() override { shut_down(); }

  bool host_accessible() const noexcept override { return false; }
  std::string staging_kind() const override { return "none (planning only)"; }
  std::string planning_note() const override { return note_; }

 private:
  void enqueue_to_host(device::Stream&, const std::shared_ptr<Buffer>&, std::size_t, void*, std::size_t) override {
    refuse(*this, "copy to the host");
  }
  void enqueue_from_host(device::Stream&, const void*, const std::shared_ptr<Buffer>&, std::size_t, std::size_t,
                         std::shared_ptr<void>) override {
    refuse(*this, "copy from the host");
  }
  void enqueue_within(device::Stream&, const std::shared_ptr<Buffer>&, std::size_t, const std::shared_ptr<Buffer>&,
                      std::size_t, std::size_t) override {
    refuse(*this, "copy within itself");
  }
  std::shared_ptr<void> staging_buffer(std::size_t) override { refuse(*this, "stage a copy"); }
  void poison(void*, std::size_t) noexcept override {}  // its simulated memory is never touched

  const std::string note_;
};

}  // namespace
}  // namespace tp::backend::cuda

namespace tp::device {

std::unique_ptr<Device> make_cuda_planning_device(DeviceId id, std::size_t capacity_bytes,
                                                  const memory::MemoryConfig& config, const DeviceOptions& options,
                                                  std::string note) {
  if (id.kind != DeviceKind::cuda) {
    TP_THROW(InvalidArgument, "cuda", "a planning-only cuda device cannot be ", id.str(), "; name a cuda:N device");
  }
  ops::kernels::register_kernels(DeviceKind::cuda, backend::cuda::cuda_kernel_table());
  // The expandable arena needs pages to map: simulated ones, reserved and never touched (nothing runs).
  std::unique_ptr<memory::MemoryStack> memory =
      config.allocator == memory::AllocatorKind::expandable
          ? memory::make_memory_stack(config, nullptr,
                                      std::make_unique<memory::SimDeviceMemory>(capacity_bytes, config.device),
                                      capacity_bytes)
          : memory::make_memory_stack(config,
                                      std::make_unique<backend::cuda::PlanningSource>(config.device, capacity_bytes),
                                      nullptr, capacity_bytes);
  return std::make_unique<backend::cuda::CudaPlanningDevice>(id, capacity_bytes, std::move(memory), options,
                                                             std::move(note));
}

}  // namespace tp::device

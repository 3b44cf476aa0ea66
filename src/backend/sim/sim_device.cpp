// SPDX-License-Identifier: Apache-2.0
// The sim backend: an accelerator simulated on the CPU. Its memory is a SimDeviceMemory of fixed capacity
// (a hard wall, like a GPU's), reached only by kernels and copies running on its streams, each served by a
// worker thread; copies are staged through pinned host memory, as a GPU's DMA engine needs. Its kernels are
// the cpu backend's table (a sim device's memory is host memory that its streams' workers reach directly).
#include "backend/cpu/cpu_kernel_table.hpp"
#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernel_settings.hpp"
#include "device/host_addressable_device.hpp"
#include "device/worker_stream.hpp"
#include "tensorpool/device/backends.hpp"

namespace tp::device {

namespace {

// CpuKernelSettings comes first: options it refuses throw before any stream exists.
class SimDevice final : public backend::cpu::CpuKernelSettings, public HostAddressableDevice {
 public:
  SimDevice(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes, std::unique_ptr<memory::MemoryStack> memory,
            const DeviceOptions& options)
      : CpuKernelSettings(options.kernels, id.str()),
        HostAddressableDevice(id, physical_id, capacity_bytes, std::move(memory), options, /*pinned_staging=*/true) {
    create_streams<WorkerStream>(options.num_streams);
  }
  ~SimDevice() override { shut_down(); }

  bool host_accessible() const noexcept override { return false; }

 private:
  void do_configure_kernels(const KernelOptions& options) override { apply(options, name()); }
  std::vector<GemmChoice> do_gemm_choices() const override { return backend::cpu::gemm_choices(); }
  std::vector<GemmPathChoice> do_gemm_path_choices() const override { return backend::cpu::gemm_path_choices(); }
  void do_warm_up_kernels() override { backend::cpu::warm_up_gemm_library(gemm_library()); }
  // The waiting host thread runs a share of the step's loops in the first helper's place.
  void do_wait_on_host(const Event& event, bool later_work_queued) override {
    backend::cpu::lend_waiting_thread([&event] { return event.query(); });
    HostAddressableDevice::do_wait_on_host(event, later_work_queued);
  }
};

}  // namespace

std::unique_ptr<Device> make_sim_device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
                                        const memory::MemoryConfig& config, const DeviceOptions& options) {
  ops::kernels::register_kernels(DeviceKind::sim, backend::cpu::cpu_kernel_table());
  auto memory = memory::make_sim_device_memory_stack(config, capacity_bytes);
  return std::make_unique<SimDevice>(id, physical_id, capacity_bytes, std::move(memory), options);
}

}  // namespace tp::device

// SPDX-License-Identifier: Apache-2.0
// The cpu backend: host memory under the device's budget, inline streams (kernels run in the calling thread,
// in stream order), host code may touch the memory directly. Staging is pageable: a host-to-host copy gains
// nothing from pinning.
#include "backend/cpu/cpu_kernel_table.hpp"
#include "backend/cpu/kernel_settings.hpp"
#include "device/host_addressable_device.hpp"
#include "device/inline_stream.hpp"
#include "tensorpool/device/backends.hpp"

namespace tp::device {

namespace {

// CpuKernelSettings comes first: options it refuses throw before any stream exists.
class CpuDevice final : public backend::cpu::CpuKernelSettings, public HostAddressableDevice {
 public:
  CpuDevice(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes, std::unique_ptr<memory::MemoryStack> memory,
            const DeviceOptions& options)
      : CpuKernelSettings(options.kernels, id.str()),
        HostAddressableDevice(id, physical_id, capacity_bytes, std::move(memory), options, /*pinned_staging=*/false) {
    create_streams<InlineStream>(options.num_streams);
  }
  ~CpuDevice() override { shut_down(); }

  bool host_accessible() const noexcept override { return true; }

 private:
  void do_configure_kernels(const KernelOptions& options) override { apply(options, name()); }
  std::vector<GemmChoice> do_gemm_choices() const override { return backend::cpu::gemm_choices(); }
  std::vector<GemmPathChoice> do_gemm_path_choices() const override { return backend::cpu::gemm_path_choices(); }
  void do_warm_up_kernels() override { backend::cpu::warm_up_gemm_library(gemm_library()); }
};

// The budget is the config's limit, or its fraction of `capacity_bytes`, or `capacity_bytes` itself.
memory::MemoryConfig with_budget(memory::MemoryConfig config, std::size_t capacity_bytes) {
  config.limit_bytes = memory::resolve_limit_bytes(config, capacity_bytes);
  config.fraction.reset();
  return config;
}

}  // namespace

std::unique_ptr<Device> make_cpu_device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
                                        const memory::MemoryConfig& config, const DeviceOptions& options) {
  ops::kernels::register_kernels(DeviceKind::cpu, backend::cpu::cpu_kernel_table());
  auto memory = memory::make_host_memory_stack(with_budget(config, capacity_bytes));
  return std::make_unique<CpuDevice>(id, physical_id, capacity_bytes, std::move(memory), options);
}

}  // namespace tp::device

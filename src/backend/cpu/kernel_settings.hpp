// SPDX-License-Identifier: Apache-2.0
#pragma once
// The CPU kernels' settings of one cpu or sim device: device::KernelOptions, given when the device is made
// (DeviceOptions::kernels) and later through Device::configure_kernels (a Session applies its options to the
// devices it uses). Both backends' devices derive from CpuKernelSettings as well as from Device; a kernel
// launcher reads its device's settings with gemm_library_of(stream.device()) when it enqueues the work.
//
// The GEMM library is per device: two devices may compute with different libraries at the same time. A
// device starts with "auto", whose choices per shape class are process-wide (kernels/gemm_auto.hpp): every
// device on auto computes a shape with the same library. The intra-op thread count is process-wide, as the
// one pool serving every CPU kernel is (intra_op_pool.hpp): a device's setting resizes that pool, and the
// latest one applied to any device holds.

#include <atomic>
#include <string_view>
#include <vector>

#include "backend/cpu/kernels/gemm.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::cpu {

class CpuKernelSettings {
 public:
  GemmLibrary gemm_library() const noexcept { return gemm_library_.load(std::memory_order_relaxed); }

 protected:
  // Applies `options` (see apply); `device` names the device in errors.
  CpuKernelSettings(const device::KernelOptions& options, std::string_view device);
  ~CpuKernelSettings() = default;
  CpuKernelSettings(const CpuKernelSettings&) = delete;
  CpuKernelSettings& operator=(const CpuKernelSettings&) = delete;

  // Checks every field first, then applies the set ones, so a refused value changes nothing: gemm_library
  // "auto", "openblas" or "onednn" ("" keeps the current one), intra_op_threads in [0, the pool's limit] (0
  // keeps the pool as it is). tp::InvalidArgument names the device, the field, the value and the accepted ones.
  void apply(const device::KernelOptions& options, std::string_view device);

 private:
  std::atomic<GemmLibrary> gemm_library_{GemmLibrary::automatic};
};

// The float32 GEMM library of a device's kernels: its setting on a cpu or sim device, OpenBLAS on any other.
[[nodiscard]] GemmLibrary gemm_library_of(const device::Device& device) noexcept;

// The process's "auto" choices (gemm_auto_choices) as Device::gemm_choices reports them.
[[nodiscard]] std::vector<device::GemmChoice> gemm_choices();
// The process's bfloat16 path choices (gemm_auto_path_choices) as Device::gemm_path_choices reports them.
[[nodiscard]] std::vector<device::GemmPathChoice> gemm_path_choices();

}  // namespace tp::backend::cpu

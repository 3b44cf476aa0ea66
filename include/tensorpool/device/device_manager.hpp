// SPDX-License-Identifier: Apache-2.0
#pragma once
// DeviceManager: the process's devices. It is configured first (simulated devices, visible devices, logical
// splits, per-device memory configs) and materialises the devices on first use (devices(), device(), info());
// configuring after that throws tp::InvalidArgument, as TensorFlow refuses to change logical devices once
// initialised.
//
// Building the list, in order:
//   1. physical devices: cpu:0, then `sim_devices` simulated accelerators of `sim_memory_bytes` each, then
//      the OpenCL devices the ICD loader reports (opencl:N, see `opencl_devices`), then one cuda:N per GPU
//      the CUDA runtime reports (after CUDA_VISIBLE_DEVICES, which the driver applies), with its whole memory;
//   2. visible devices (TP_VISIBLE_DEVICES="sim:1,sim:0"): only the named accelerators stay, in that order,
//      renumbered from 0 (so with "sim:1,sim:0" the device sim:0 is physical sim:1, as CUDA_VISIBLE_DEVICES);
//      cpu:0 always stays;
//   3. logical splits: a visible device split into N logical devices, each with its own memory limit (the
//      limits together must fit in its capacity), numbered in sequence with the others of its kind (a split
//      of sim:0 into 2 plus an unsplit sim:1 gives sim:0 and sim:1, both physical sim:0, and sim:2, physical
//      sim:1). Each logical device is a device of its own whose capacity is its limit.
// Each device's memory stack comes from its MemoryConfig: memory_configs[final id], else
// default_memory_config (the expandable arena, grow on demand, tracked: unlike TensorFlow, which
// preallocates, we grow), with `device` set to the device's name and the TP_ALLOW_GROWTH / TP_ALLOCATOR /
// TP_MEMORY_FRACTION overrides applied. A device that takes default_memory_config with its expandable arena
// and no TP_ALLOCATOR gets default_allocator(its kind, its policy) instead: BFC where the arena does not
// apply (a preallocated budget, an opencl device).
//
// Errors: a visible entry, split or memory config naming a device that does not exist throws
// tp::InvalidArgument naming it and listing the devices that do; so do duplicates and bad limits. These are
// checked when the devices are materialised (configuration calls may come in any order); a failed
// materialisation builds no devices and leaves the manager configurable, so the caller may fix it and retry.
//
// Thread safety: every member is thread-safe. Devices live as long as the manager; buffers must be dropped
// before it is destroyed.

#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/device/cuda_properties.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/device/device_id.hpp"
#include "tensorpool/device/opencl_properties.hpp"
#include "tensorpool/memory/memory_config.hpp"

namespace tp::device {

// Upper bound of DeviceManagerOptions::sim_devices (and TP_SIM_DEVICES).
inline constexpr int kMaxSimDevices = 64;
// Upper bound of DeviceManagerOptions::opencl_devices (and TP_OPENCL_DEVICES).
inline constexpr int kMaxOpenClDevices = 64;
// Least memory of a simulated device (sim_memory_bytes, TP_SIM_MEMORY): one 2 MiB granule, the least every
// allocator can use (the expandable arena commits whole granules). Logical devices may be smaller.
inline constexpr std::size_t kMinSimMemoryBytes = std::size_t{2} << 20;

struct LogicalDeviceConfig {
  std::size_t memory_limit_bytes = 0;  // > 0
};

// A device's figures for `tensorpool devices` and reports.
struct DeviceInfo {
  std::string name;      // "sim:0"
  std::string kind;      // "sim"
  std::string physical;  // "sim:1"
  std::size_t capacity_bytes = 0;
  std::size_t limit_bytes = 0;
  std::size_t in_use_bytes = 0;
  std::size_t reserved_bytes = 0;
  std::size_t peak_in_use_bytes = 0;
  std::string allocator;  // "bfc"
  std::string policy;     // "grow" | "preallocate"
  std::size_t streams = 0;
  std::string staging;                     // Device::staging_kind(): "mlock" | "CL_MEM_ALLOC_HOST_PTR" | "pageable"
  std::optional<OpenClProperties> opencl;  // the OpenCL device behind an opencl device
  std::optional<CudaProperties> cuda;      // the GPU behind a cuda device (free_bytes read by info())
};

struct DeviceManagerOptions {
  int sim_devices = 0;                                  // 0..kMaxSimDevices
  std::size_t sim_memory_bytes = std::size_t{1} << 30;  // each; >= kMinSimMemoryBytes
  // OpenCL devices: unset gives one opencl:N per device the ICD loader reports. N (0..kMaxOpenClDevices)
  // gives N devices spread in turn over the physical ones, each physical device's global memory shared
  // evenly among its devices: with PoCL's single CPU device, opencl_devices = 2 gives opencl:0 and opencl:1
  // on physical opencl:0, each with half its memory and its own queues (for mirrored tests). 0 gives none.
  std::optional<int> opencl_devices;
  // CUDA devices: true plans one cuda:N per GPU the CUDA runtime reports (after CUDA_VISIBLE_DEVICES); false
  // plans none and never asks the runtime, so a process that uses no GPU loads no driver and creates no CUDA
  // context on a machine with GPUs (TP_CUDA_DEVICES=0).
  bool cuda_devices = true;
  // Planning-only cuda devices (make_cuda_planning_device), for `tensorpool estimate` on a machine without a
  // GPU: when set, cuda_devices is true and the CUDA runtime reports no GPU, the physical devices are
  // cuda:0..cuda:count-1, each of capacity_bytes, that plan steps and run none. A process with a GPU ignores
  // it (its real devices plan). Never set by `train`: nothing may run on them.
  struct CudaPlanning {
    int count = 0;                   // 1..kMaxSimDevices
    std::size_t capacity_bytes = 0;  // > 0
    std::string source;              // where the capacity came from, for the note ("--device-memory")
  };
  std::optional<CudaPlanning> cuda_planning;
  std::optional<std::vector<DeviceId>> visible_devices;         // unset: all
  std::map<DeviceId, std::vector<LogicalDeviceConfig>> splits;  // keyed by visible (renumbered) id; cpu:0 too
  std::map<DeviceId, memory::MemoryConfig> memory_configs;      // keyed by final id; else the default
  memory::MemoryConfig default_memory_config = default_device_memory_config();
  DeviceOptions device_options;
  std::size_t cpu_memory_bytes = 0;  // cpu:0's capacity; 0: the host's physical memory

  // The expandable arena, GrowthPolicy::grow, tracking on, the whole capacity as the budget.
  static memory::MemoryConfig default_device_memory_config();
};

// The allocator of a device of `kind` whose allocator nobody chose (the CLI without --allocator, the Python
// package's set_memory_growth, default_memory_config): the expandable arena when memory grows on demand, BFC
// when the budget is preallocated (TensorFlow's behaviour) or the device cannot map pages into a reserved
// range (opencl). The arena follows a step's plan: it packs blocks at 256-byte granularity and commits a
// granule only while a block touches it, so the variables and the step arena cost their sizes plus at most a
// granule of rounding, where BFC's split rule (TensorFlow's) may keep up to twice a request.
[[nodiscard]] memory::AllocatorKind default_allocator(DeviceKind kind, memory::GrowthPolicy policy) noexcept;

// The allocator a cuda device on `gpu` builds for a config asking for `requested`: the same, except that the
// expandable arena needs CUDA's virtual memory management (cuMemMap), so on a GPU without it (older GPUs,
// some virtualised ones) it falls back to BFC, which serves the same allocations from cudaMalloc regions. The
// DeviceManager logs the fallback once per device. Where expandable is the default (default_allocator), this
// keeps such a GPU usable instead of failing to build its device.
[[nodiscard]] memory::AllocatorKind cuda_allocator_for(memory::AllocatorKind requested,
                                                       const CudaProperties& gpu) noexcept;

class DeviceManager {
 public:
  explicit DeviceManager(DeviceManagerOptions options = {}, memory::GetEnv get_env = ::getenv);
  ~DeviceManager();
  DeviceManager(const DeviceManager&) = delete;
  DeviceManager& operator=(const DeviceManager&) = delete;

  // The process-wide manager, configured from the environment (TP_SIM_DEVICES, TP_SIM_MEMORY,
  // TP_OPENCL_DEVICES, TP_CUDA_DEVICES, TP_VISIBLE_DEVICES, TP_GEMM and the memory overrides) at its first use.
  static DeviceManager& instance();

  // Configuration: each throws tp::InvalidArgument once devices exist, or naming the bad value (a count
  // outside 0..kMaxSimDevices or 0..kMaxOpenClDevices, memory below kMinSimMemoryBytes, a duplicate visible entry, an empty split or
  // a zero limit).
  void set_sim_devices(int count, std::size_t memory_bytes);
  // How many opencl devices to plan (DeviceManagerOptions::opencl_devices; std::nullopt: one per device the
  // ICD loader reports). 0 keeps the OpenCL driver unloaded: a run that uses no opencl device then does not
  // pay for the driver (PoCL maps LLVM into the process).
  void set_opencl_devices(std::optional<int> count);
  // Whether to plan cuda devices (DeviceManagerOptions::cuda_devices).
  void set_cuda_devices(bool enabled);
  // DeviceManagerOptions::cuda_planning; throws tp::InvalidArgument for a count outside 1..kMaxSimDevices or a
  // zero capacity.
  void set_cuda_planning_devices(int count, std::size_t capacity_bytes, std::string source);
  void set_visible_devices(std::vector<DeviceId> visible);
  void set_logical_devices(DeviceId visible_device, std::vector<LogicalDeviceConfig> logical);
  void set_memory_config(DeviceId device, memory::MemoryConfig config);
  void set_device_options(DeviceOptions options);

  // Materialises the devices on first call. Listed cpu devices first, then the accelerators, each kind in
  // index order.
  std::vector<Device*> devices();
  std::vector<Device*> devices(DeviceKind kind);
  // Throws tp::InvalidArgument naming the id and the devices that exist.
  Device& device(DeviceId id);
  Device& device(std::string_view name) { return device(parse_device_id(name)); }
  [[nodiscard]] std::vector<DeviceInfo> info();
  [[nodiscard]] bool initialised() const;
  // The ids of the devices the current configuration gives (the built ones once initialised), in the order
  // of devices(), without building any: callers check a device exists before configuring it. Throws what
  // materialising would for a bad visible list or split.
  [[nodiscard]] std::vector<DeviceId> planned_devices() const;

 private:
  void check_not_initialised(std::string_view what) const;  // requires mutex_
  void materialise();                                       // requires mutex_

  mutable std::mutex mutex_;  // guards everything below
  DeviceManagerOptions options_;
  memory::GetEnv get_env_;
  std::vector<std::unique_ptr<Device>> devices_;  // empty until materialised
  bool initialised_ = false;
};

// Reads TP_SIM_DEVICES (an integer in 0..kMaxSimDevices), TP_SIM_MEMORY (bytes >= 2MiB, e.g. "1GiB"),
// TP_OPENCL_DEVICES (an integer in 0..kMaxOpenClDevices: DeviceManagerOptions::opencl_devices),
// TP_CUDA_DEVICES (0 or 1: DeviceManagerOptions::cuda_devices) and
// TP_VISIBLE_DEVICES (a comma-separated list of device ids, spaces allowed; an empty value hides every
// accelerator, as CUDA_VISIBLE_DEVICES="") and TP_GEMM (auto, openblas or onednn: the float32 GEMM library the
// devices start with, DeviceOptions::kernels) into `options`; unset variables leave it as it is. A bad value
// (malformed, out of range, an empty or duplicate list entry) throws tp::InvalidArgument naming the variable,
// its value and the accepted form.
void apply_device_env(DeviceManagerOptions& options, const memory::GetEnv& get_env = ::getenv);

}  // namespace tp::device

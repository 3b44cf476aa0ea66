// SPDX-License-Identifier: Apache-2.0
// missing_device_advice: the rules of device/missing_device.hpp, first match wins.
#include "tensorpool/device/missing_device.hpp"

#include <fmt/format.h>

#include <cstddef>

#include "tensorpool/device/backends.hpp"

namespace tp::device {
namespace {

// The fix for a missing opencl:N that no setting hides: the driver to install when none is found, else the
// logical split (TP_OPENCL_DEVICES, read when the process starts) that gives opencl:N.
std::string missing_opencl_fix(const DeviceId& id) {
  const std::size_t physical = opencl_physical_devices().size();
  if (physical == 0) {
    return fmt::format("no OpenCL device found: {} (scripts/install-deps installs pocl-opencl-icd)",
                       opencl_unavailable_reason());
  }
  const int wanted = id.index + 1;
  const std::string split = physical == 1 ? fmt::format("split it into {} logical opencl devices", wanted)
                                          : fmt::format("spread {} logical opencl devices over them", wanted);
  return fmt::format(
      "the OpenCL driver reports {} device{}; set TP_OPENCL_DEVICES={} to {} (each with its own queues and an even "
      "share of the memory)",
      physical, physical == 1 ? "" : "s", wanted, split);
}

}  // namespace

std::string missing_device_advice(const DeviceId& id, const std::vector<DeviceId>& existing,
                                  const MissingDeviceWording& wording, const memory::GetEnv& get_env) {
  std::string listed;
  std::string same_kind;
  for (const DeviceId& device : existing) {
    listed += (listed.empty() ? "" : ", ") + device.str();
    if (device.kind == id.kind) same_kind += (same_kind.empty() ? "" : ",") + device.str();
  }
  const bool no_cuda = id.kind == DeviceKind::cuda && cuda_physical_devices().empty();
  const bool accelerator =
      id.kind == DeviceKind::sim || id.kind == DeviceKind::opencl || (id.kind == DeviceKind::cuda && !no_cuda);
  // cuda devices have no count of their own: one per GPU the driver shows (CUDA_VISIBLE_DEVICES).
  const char* const count_variable = id.kind == DeviceKind::opencl ? "TP_OPENCL_DEVICES"
                                     : id.kind == DeviceKind::sim  ? "TP_SIM_DEVICES"
                                                                   : nullptr;
  const char* const count = count_variable != nullptr ? get_env(count_variable) : nullptr;
  const char* const visible = get_env("TP_VISIBLE_DEVICES");
  std::string fix;
  if (no_cuda) {
    fix =
        fmt::format("{}; use simulated devices (e.g. sim:0,sim:1), opencl devices or cpu:0", cuda_unavailable_reason());
  } else if (accelerator && visible != nullptr) {
    fix = fmt::format("TP_VISIBLE_DEVICES='{}' hides it; add it there or unset TP_VISIBLE_DEVICES", visible);
  } else if (id.kind == DeviceKind::sim) {
    fix = fmt::format("set TP_SIM_DEVICES={}", id.index + 1);
    if (!wording.sim_note.empty()) fix += fmt::format(" {}", wording.sim_note);
  } else if (id.kind == DeviceKind::opencl && count != nullptr && !opencl_physical_devices().empty()) {
    fix = fmt::format(
        "TP_OPENCL_DEVICES={} leaves it out; set TP_OPENCL_DEVICES={} (or unset it for one opencl device per "
        "device the OpenCL driver reports)",
        count, id.index + 1);
  } else if (id.kind == DeviceKind::opencl) {
    fix = missing_opencl_fix(id);
  } else if (id.kind == DeviceKind::cuda) {
    const std::size_t gpus = cuda_physical_devices().size();
    fix = fmt::format(
        "the CUDA runtime reports {} GPU{} (CUDA_VISIBLE_DEVICES chooses which); split one into logical devices "
        "(DeviceManager::set_logical_devices) for more cuda devices",
        gpus, gpus == 1 ? "" : "s");
  } else {
    fix = "cpu:0 is the only cpu device";
  }
  if (accelerator) fix += fmt::format(", or use {}{}", wording.use, same_kind.empty() ? "cpu:0" : same_kind);
  const std::string setting =
      accelerator && count != nullptr ? fmt::format(" ({}={})", count_variable, count) : std::string();
  return fmt::format("this process has {}{}; {}", listed.empty() ? "no devices" : listed, setting, fix);
}

}  // namespace tp::device

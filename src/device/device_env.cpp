// SPDX-License-Identifier: Apache-2.0
// apply_device_env: the device variables an operator sets without touching code. Every bad value is an
// error naming the variable, its value and the accepted form; an unset variable leaves the option alone.
#include <cctype>
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/device/gemm_choice.hpp"
#include "tensorpool/memory/memory_resource.hpp"

namespace tp::device {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())) != 0) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) text.remove_suffix(1);
  return text;
}

[[noreturn]] void bad_variable(std::string_view variable, std::string_view value, std::string_view why,
                               std::string_view accepted) {
  TP_THROW(InvalidArgument, "device", variable, "='", value, "' is not valid (", why, "); accepted: ", accepted,
           " (unset the variable to keep the configured value)");
}

int parse_sim_devices(std::string_view value) {
  constexpr std::string_view kAccepted = "an integer from 0 to 64, e.g. 2";
  static_assert(kMaxSimDevices == 64, "update kAccepted");
  const std::string_view text = trim(value);
  int count = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size()) {
    bad_variable("TP_SIM_DEVICES", value, "not an integer", kAccepted);
  }
  if (count < 0 || count > kMaxSimDevices) bad_variable("TP_SIM_DEVICES", value, "out of range", kAccepted);
  return count;
}

std::size_t parse_sim_memory(std::string_view value) {
  constexpr std::string_view kAccepted = "a byte size from 2MiB up, e.g. 1073741824, 512MiB or 1.5GiB";
  static_assert(kMinSimMemoryBytes == 2 * kMiB, "update kAccepted");
  std::size_t bytes = 0;
  try {
    bytes = parse_bytes(value, "TP_SIM_MEMORY");
  } catch (const InvalidArgument&) {
    bad_variable("TP_SIM_MEMORY", value, "not a byte size", kAccepted);
  }
  if (bytes < kMinSimMemoryBytes || bytes > memory::kMaxAllocationBytes) {
    bad_variable("TP_SIM_MEMORY", value, "out of range", kAccepted);
  }
  return bytes;
}

int parse_opencl_devices(std::string_view value) {
  constexpr std::string_view kAccepted = "an integer from 0 to 64, e.g. 2 (0 hides the OpenCL devices)";
  static_assert(kMaxOpenClDevices == 64, "update kAccepted");
  const std::string_view text = trim(value);
  int count = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size()) {
    bad_variable("TP_OPENCL_DEVICES", value, "not an integer", kAccepted);
  }
  if (count < 0 || count > kMaxOpenClDevices) bad_variable("TP_OPENCL_DEVICES", value, "out of range", kAccepted);
  return count;
}

// TP_CUDA_DEVICES: 0 plans no cuda device (the CUDA runtime is not asked), 1 one per GPU (the default).
bool parse_cuda_devices(std::string_view value) {
  constexpr std::string_view kAccepted = "0 (no cuda devices, the CUDA runtime not asked) or 1 (one per GPU)";
  const std::string_view text = trim(value);
  if (text == "0") return false;
  if (text == "1") return true;
  bad_variable("TP_CUDA_DEVICES", value, "not 0 or 1", kAccepted);
}

// "" (or only spaces) is the empty list: no accelerator visible, as CUDA_VISIBLE_DEVICES="".
std::vector<DeviceId> parse_visible_devices(std::string_view value) {
  constexpr std::string_view kAccepted =
      "a comma-separated list of device ids, e.g. sim:1,sim:0 (an empty value hides every accelerator)";
  std::vector<DeviceId> visible;
  if (trim(value).empty()) return visible;
  std::string_view rest = value;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view entry = trim(rest.substr(0, comma));
    if (entry.empty()) bad_variable("TP_VISIBLE_DEVICES", value, "an empty entry", kAccepted);
    DeviceId id;
    try {
      id = parse_device_id(entry, "TP_VISIBLE_DEVICES entry");
    } catch (const InvalidArgument&) {
      bad_variable("TP_VISIBLE_DEVICES", value, "'" + std::string(entry) + "' is not a device id", kAccepted);
    }
    for (const DeviceId& seen : visible) {
      if (seen == id) {
        bad_variable("TP_VISIBLE_DEVICES", value, id.str() + " is listed twice", kAccepted);
      }
    }
    visible.push_back(id);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return visible;
}

// The CPU kernels' float32 GEMM library (KernelOptions::gemm_library), the value a device starts with.
std::string parse_gemm(std::string_view value) {
  const std::string_view text = trim(value);
  for (const std::string_view library : kGemmLibraryNames) {
    if (text == library) return std::string(library);
  }
  bad_variable("TP_GEMM", value, "not a GEMM library", "auto, openblas or onednn");
}

}  // namespace

void apply_device_env(DeviceManagerOptions& options, const memory::GetEnv& get_env) {
  // Parse everything before assigning anything, so a bad variable leaves `options` unchanged.
  DeviceManagerOptions updated = options;
  if (const char* value = get_env("TP_SIM_DEVICES"); value != nullptr) {
    updated.sim_devices = parse_sim_devices(value);
  }
  if (const char* value = get_env("TP_SIM_MEMORY"); value != nullptr) {
    updated.sim_memory_bytes = parse_sim_memory(value);
  }
  if (const char* value = get_env("TP_OPENCL_DEVICES"); value != nullptr) {
    updated.opencl_devices = parse_opencl_devices(value);
  }
  if (const char* value = get_env("TP_CUDA_DEVICES"); value != nullptr) {
    updated.cuda_devices = parse_cuda_devices(value);
  }
  if (const char* value = get_env("TP_VISIBLE_DEVICES"); value != nullptr) {
    updated.visible_devices = parse_visible_devices(value);
  }
  if (const char* value = get_env("TP_GEMM"); value != nullptr) {
    updated.device_options.kernels.gemm_library = parse_gemm(value);
  }
  options = std::move(updated);
}

}  // namespace tp::device

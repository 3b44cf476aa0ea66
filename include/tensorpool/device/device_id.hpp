// SPDX-License-Identifier: Apache-2.0
#pragma once
// DeviceId: a device's kind and ordinal, written "cpu:0", "sim:1", "opencl:0", "cuda:0". Ordinals are dense
// per kind in the order the DeviceManager lists devices (after visible-device reordering and logical splits).

#include <array>
#include <compare>
#include <string>
#include <string_view>

namespace tp::device {

enum class DeviceKind { cpu, sim, opencl, cuda };
// Every kind, in declaration order: tables with one entry per kind (the kernel registry, the graph ops'
// kernels) iterate it, so a new kind belongs here too.
inline constexpr std::array kDeviceKinds{DeviceKind::cpu, DeviceKind::sim, DeviceKind::opencl, DeviceKind::cuda};

// "cpu", "sim", "opencl", "cuda".
std::string_view to_string(DeviceKind kind) noexcept;

struct DeviceId {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  std::string str() const;
  friend auto operator<=>(const DeviceId&, const DeviceId&) = default;
};

// Parses "kind:index" ("sim:1"); a bare kind means index 0 ("cpu" -> cpu:0). Surrounding spaces are ignored.
// Throws tp::InvalidArgument naming `what`, the text and the accepted forms.
[[nodiscard]] DeviceId parse_device_id(std::string_view text, std::string_view what = "device");

}  // namespace tp::device

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/device/device_id.hpp"

#include <charconv>
#include <string>

#include "tensorpool/core/error.hpp"

namespace tp::device {

std::string_view to_string(DeviceKind kind) noexcept {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::sim: return "sim";
    case DeviceKind::opencl: return "opencl";
    case DeviceKind::cuda: return "cuda";
  }
  return "unknown";
}

std::string DeviceId::str() const { return std::string(to_string(kind)) + ":" + std::to_string(index); }

namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

DeviceId parse_device_id(std::string_view text, std::string_view what) {
  const std::string_view trimmed = trim(text);
  const std::size_t colon = trimmed.find(':');
  const std::string_view kind_text = trimmed.substr(0, colon);
  DeviceId id;
  if (kind_text == "cpu") {
    id.kind = DeviceKind::cpu;
  } else if (kind_text == "sim") {
    id.kind = DeviceKind::sim;
  } else if (kind_text == "opencl") {
    id.kind = DeviceKind::opencl;
  } else if (kind_text == "cuda") {
    id.kind = DeviceKind::cuda;
  } else {
    TP_THROW(InvalidArgument, "device", what, " '", text,
             "' is not a device: write kind:index with kind cpu, sim, opencl or cuda, e.g. sim:0");
  }
  if (colon == std::string_view::npos) return id;
  const std::string_view index_text = trimmed.substr(colon + 1);
  const char* end = index_text.data() + index_text.size();
  const auto [ptr, error] = std::from_chars(index_text.data(), end, id.index);
  if (index_text.empty() || error != std::errc() || ptr != end || id.index < 0) {
    TP_THROW(InvalidArgument, "device", what, " '", text,
             "' has a bad index: write kind:index with a non-negative integer index, e.g. sim:0");
  }
  return id;
}

}  // namespace tp::device

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/allocation_tag.hpp"

namespace tp::memory {

std::string_view to_string(AllocationKind kind) noexcept {
  switch (kind) {
    case AllocationKind::unknown: return "unknown";
    case AllocationKind::parameter: return "parameter";
    case AllocationKind::gradient: return "weight_gradient";
    case AllocationKind::optimizer_state: return "optimizer_state";
    case AllocationKind::activation: return "activation";
    case AllocationKind::temporary: return "temporary";
    case AllocationKind::staging: return "staging";
    case AllocationKind::step_arena: return "step_arena";
    case AllocationKind::fetched: return "fetched";
  }
  return "unknown";
}

std::string AllocationTag::describe() const {
  if (empty() && shape.empty() && dtype.empty()) return "<untagged>";
  std::string text = name.empty() ? std::string("<unnamed>") : name;
  std::string details;
  auto add = [&details](std::string_view part) {
    if (!details.empty()) details += ", ";
    details += part;
  };
  if (!op.empty()) add(op);
  if (!dtype.empty() || !shape.empty()) {
    std::string type = dtype.empty() ? std::string("?") : dtype;
    type += "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (i != 0) type += ",";
      type += std::to_string(shape[i]);
    }
    type += "]";
    add(type);
  }
  if (kind != AllocationKind::unknown) add(to_string(kind));
  if (step >= 0) add("step " + std::to_string(step));
  if (!details.empty()) text += " (" + details + ")";
  return text;
}

}  // namespace tp::memory

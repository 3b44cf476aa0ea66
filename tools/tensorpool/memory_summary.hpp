// SPDX-License-Identifier: Apache-2.0
#pragma once
// train's "Memory summary": per device, what was measured (peak in use, reserved, fragmentation), what was
// planned, the live variables by kind, the step's planned bytes by kind and the largest tensors; printed to
// stdout and returned for --summary-json.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/runtime/memory_plan.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::cli {

nlohmann::json memory_summary(device::DeviceManager& manager, const std::vector<std::string>& names,
                              const runtime::MemoryPlan& plan, const train::Sequential& model);

}  // namespace tp::cli

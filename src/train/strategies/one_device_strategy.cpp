// SPDX-License-Identifier: Apache-2.0
#include "train/strategies/one_device_strategy.hpp"

#include "tensorpool/core/error.hpp"
#include "train/replicated_update.hpp"

namespace tp::train {

std::vector<std::string> OneDeviceStrategy::resolve_devices(device::DeviceManager& manager,
                                                            const CompileOptions& /*options*/,
                                                            const std::vector<Dense>& /*layers*/) {
  if (description().devices.size() > 1) {
    TP_THROW(InvalidArgument, "train", "the one-device strategy takes one device, not ", description().devices.size());
  }
  std::vector<std::string> devices = listed_or_accelerators(manager);
  devices.resize(1);
  return devices;
}

void OneDeviceStrategy::add_update_stage(const ModelSpec& spec, const std::vector<std::string>& devices,
                                         const GradientStage& gradients, ModelGraph& model) const {
  add_replicated_updates(spec, devices, gradients, model);
}

}  // namespace tp::train

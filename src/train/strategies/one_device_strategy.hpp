// SPDX-License-Identifier: Apache-2.0
#pragma once
// OneDeviceStrategy (Strategy::one_device): one replica on one device (the listed one, else the first
// accelerator, else cpu:0); its gradients go straight to the optimizer's updates, with no collective.

#include "tensorpool/train/distribution_strategy.hpp"

namespace tp::train {

class OneDeviceStrategy final : public DistributionStrategy {
 public:
  using DistributionStrategy::DistributionStrategy;

  void add_update_stage(const ModelSpec& spec, const std::vector<std::string>& devices, const GradientStage& gradients,
                        ModelGraph& model) const override;
  std::string_view name() const override { return "one"; }
  bool single_process() const override { return true; }

 protected:
  std::vector<std::string> resolve_devices(device::DeviceManager& manager, const CompileOptions& options,
                                           const std::vector<Dense>& layers) override;
};

}  // namespace tp::train

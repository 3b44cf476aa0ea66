// SPDX-License-Identifier: Apache-2.0
#pragma once
// MirroredStrategy (Strategy::mirrored): one replica per device of this process (the listed ones, else every
// accelerator), gradients summed by AllReduce buckets (description().all_reduce: ring or reduce_to_one) and the
// same update on every replica; with ZeRO (shard optimizer / gradients, two or more devices) the sharded
// update (train/sharded_update.hpp) instead.

#include "tensorpool/train/distribution_strategy.hpp"

namespace tp::train {

class MirroredStrategy : public DistributionStrategy {
 public:
  using DistributionStrategy::DistributionStrategy;

  void add_update_stage(const ModelSpec& spec, const std::vector<std::string>& devices, const GradientStage& gradients,
                        ModelGraph& model) const override;
  std::string_view name() const override { return "mirrored"; }
  bool single_process() const override { return true; }

 protected:
  std::vector<std::string> resolve_devices(device::DeviceManager& manager, const CompileOptions& options,
                                           const std::vector<Dense>& layers) override;
  // ZeRO splits state between replicas: two or more devices.
  void check_sharding(std::size_t devices) const override;
};

}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
#include "train/strategies/mirrored_strategy.hpp"

#include "train/replicated_update.hpp"
#include "train/sharded_update.hpp"

namespace tp::train {

std::vector<std::string> MirroredStrategy::resolve_devices(device::DeviceManager& manager,
                                                           const CompileOptions& /*options*/,
                                                           const std::vector<Dense>& /*layers*/) {
  return listed_or_accelerators(manager);
}

void MirroredStrategy::check_sharding(std::size_t devices) const {
  if (description().shard != Shard::none && devices >= 2) return;
  DistributionStrategy::check_sharding(devices);
}

void MirroredStrategy::add_update_stage(const ModelSpec& spec, const std::vector<std::string>& devices,
                                        const GradientStage& gradients, ModelGraph& model) const {
  ModelSpec settled = spec;
  if (spec.shard == Shard::automatic) {
    settled.shard = can_fuse_update(spec, devices, gradients, model.graph) ? Shard::optimizer : Shard::none;
  }
  model.shard = settled.shard;
  if (settled.shard != Shard::none) {  // ZeRO: sharded optimizer state (and gradients)
    add_sharded_updates(settled, devices, gradients, model);
  } else {
    add_replicated_updates(settled, devices, gradients, model);
  }
}

}  // namespace tp::train

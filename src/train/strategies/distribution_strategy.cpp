// SPDX-License-Identifier: Apache-2.0
// The base's defaults and the factory: the one place that maps a Strategy::Kind to its class.
#include "tensorpool/train/distribution_strategy.hpp"

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/distribute/nccl.hpp"
#include "tensorpool/train/fit.hpp"
#include "tensorpool/train/sequential.hpp"
#include "train/strategies/mirrored_strategy.hpp"
#include "train/strategies/multi_worker_strategy.hpp"
#include "train/strategies/one_device_strategy.hpp"
#include "train/strategies/parameter_server_strategy.hpp"

namespace tp::train {

std::vector<std::string> DistributionStrategy::prepare(device::DeviceManager& manager, const CompileOptions& options,
                                                       const std::vector<Dense>& layers) {
  std::vector<std::string> devices = resolve_devices(manager, options, layers);
  std::vector<std::string> physical;
  for (const std::string& name : devices) physical.push_back(manager.device(name).physical_id().str());
  AllReduceChoice choice = choose_all_reduce(description_.kind, description_.all_reduce, devices, physical);
  if (description_.all_reduce == AllReduce::automatic && choice.all_reduce == AllReduce::nccl &&
      description_.kind == Strategy::Kind::mirrored) {
    // auto means NCCL where it can serve: a process without a loadable NCCL keeps the ring (copies between the
    // GPUs), saying why. Not across workers, which must all choose alike: there the missing NCCL is the error.
    try {
      static_cast<void>(distribute::nccl_version());
    } catch (const DeviceError& error) {
      choice = {AllReduce::ring, ""};
      TP_LOG(warning, "train", "all-reduce: ring, not nccl: ", error.what());
    }
  }
  if (description_.all_reduce == AllReduce::automatic && !choice.reason.empty()) TP_LOG(info, "train", choice.reason);
  description_.all_reduce = choice.all_reduce;
  if (description_.bucket_bytes <= 0) {
    TP_THROW(InvalidArgument, "train", "bucket_bytes = ", description_.bucket_bytes,
             " must be positive (the AllReduce buckets' size limit; default 25 MiB)");
  }
  check_sharding(devices.size());
  return devices;
}

void DistributionStrategy::check_sharding(std::size_t devices) const {
  if (description_.shard == Shard::none || description_.shard == Shard::automatic) return;
  TP_THROW(InvalidArgument, "train", "shard = ", name_of(description_.shard),
           " needs the mirrored strategy over two or more devices, or the multi-worker strategy (ZeRO splits state "
           "between replicas); this strategy has ",
           devices, " device(s)");
}

std::vector<std::string> DistributionStrategy::listed_or_accelerators(device::DeviceManager& manager) const {
  if (!description_.devices.empty()) {
    for (const std::string& name : description_.devices) manager.device(name);  // throws naming a missing device
    return description_.devices;
  }
  std::vector<std::string> accelerators;
  for (device::Device* device : manager.devices()) {
    if (device->kind() != device::DeviceKind::cpu) accelerators.push_back(device->name());
  }
  if (accelerators.empty()) accelerators.emplace_back("cpu:0");
  return accelerators;
}

void DistributionStrategy::check_step(StepCall /*call*/) const {}

void DistributionStrategy::reduce_step_result(double& /*loss*/, double& /*correct*/) const {}

void DistributionStrategy::append_variable(const std::string& name, const Tensor& value,
                                           std::vector<std::pair<std::string, Tensor>>& values) const {
  values.emplace_back(checkpoint_name(name), value);
}

FitResult DistributionStrategy::fit_own_loop(Sequential& /*model*/, const data::Dataset& /*train*/,
                                             const FitOptions& /*options*/) const {
  TP_THROW(InvalidArgument, "train", "the ", name(), " strategy trains with fit()'s steps; it has no loop of its own");
}

void DistributionStrategy::before_restore(const FitOptions& /*options*/,
                                          const std::optional<CheckpointState>& /*state*/) const {}

void DistributionStrategy::after_restore(Sequential& /*model*/) const {}

std::string DistributionStrategy::header_line(bool /*across_processes*/, int /*ranks*/) const { return {}; }

runtime::MemoryPlan DistributionStrategy::plan(Sequential& model, std::int64_t batch_size,
                                               std::string_view batches_on) const {
  return model.plan(batch_size, batches_on);
}

std::string DistributionStrategy::checkpoint_name(const std::string& name) {
  return name.rfind("replica_", 0) == 0 ? name.substr(name.find('/') + 1) : name;
}

std::unique_ptr<DistributionStrategy> make_distribution_strategy(const Strategy& strategy) {
  switch (strategy.kind) {
    case Strategy::Kind::one: return std::make_unique<OneDeviceStrategy>(strategy);
    case Strategy::Kind::mirrored: return std::make_unique<MirroredStrategy>(strategy);
    case Strategy::Kind::multi_worker: return std::make_unique<MultiWorkerStrategy>(strategy);
    case Strategy::Kind::parameter_server: return std::make_unique<ParameterServerStrategy>(strategy);
  }
  TP_THROW(InvalidArgument, "train", "strategy kind ", static_cast<int>(strategy.kind),
           " is not one, mirrored, multi_worker or parameter_server");
}

}  // namespace tp::train

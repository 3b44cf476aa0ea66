// SPDX-License-Identifier: Apache-2.0
#pragma once
// ParameterServerStrategy (Strategy::parameter_server; asynchronous, train/parameter_server.hpp): the model is
// compiled on the parameter device, whose one-replica graph holds the variables and the optimizer state
// between runs (evaluation, prediction, checkpoints); training runs the strategy's own loop
// (fit_parameter_server: in-process worker threads, or MPI ranks under mpirun), never fit()'s synchronous steps.
// Its memory plan is the variables on the parameter device plus each worker's step (plan_parameter_server).

#include "tensorpool/train/distribution_strategy.hpp"

namespace tp::train {

class ParameterServerStrategy final : public DistributionStrategy {
 public:
  using DistributionStrategy::DistributionStrategy;

  void add_update_stage(const ModelSpec& spec, const std::vector<std::string>& devices, const GradientStage& gradients,
                        ModelGraph& model) const override;
  void check_step(StepCall call) const override;
  bool runs_own_loop() const override { return true; }
  FitResult fit_own_loop(Sequential& model, const data::Dataset& train, const FitOptions& options) const override;

  std::string_view name() const override { return "parameter_server"; }
  std::string header_line(bool across_processes, int ranks) const override;
  std::vector<std::string> named_devices() const override;
  bool spans_processes() const override;
  runtime::MemoryPlan plan(Sequential& model, std::int64_t batch_size, std::string_view batches_on) const override;

 protected:
  // check_parameter_server's checks; the model's own graph lives on the parameter device.
  std::vector<std::string> resolve_devices(device::DeviceManager& manager, const CompileOptions& options,
                                           const std::vector<Dense>& layers) override;
};

}  // namespace tp::train

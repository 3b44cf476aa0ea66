// SPDX-License-Identifier: Apache-2.0
#include "train/strategies/parameter_server_strategy.hpp"

#include <fmt/format.h>

#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/parameter_transport.hpp"
#include "tensorpool/train/parameter_server.hpp"
#include "train/replicated_update.hpp"

namespace tp::train {

std::vector<std::string> ParameterServerStrategy::resolve_devices(device::DeviceManager& manager,
                                                                  const CompileOptions& options,
                                                                  const std::vector<Dense>& layers) {
  check_parameter_server(description(), options, layers, manager);
  return {description().parameter_device};  // the variables' home; the workers build their own graphs
}

void ParameterServerStrategy::add_update_stage(const ModelSpec& spec, const std::vector<std::string>& devices,
                                               const GradientStage& gradients, ModelGraph& model) const {
  add_replicated_updates(spec, devices, gradients, model);  // one replica: the server's updates, no collective
}

void ParameterServerStrategy::check_step(StepCall call) const {
  if (call == StepCall::train) {
    TP_THROW(InvalidArgument, "train",
             "train_step under the parameter-server strategy: its workers train asynchronously; call fit() (or "
             "fit_parameter_server) on the model instead");
  }
  TP_THROW(InvalidArgument, "train",
           "launch_train_step under the parameter-server strategy: its steps exchange data on the host between "
           "steps; call train_step");
}

FitResult ParameterServerStrategy::fit_own_loop(Sequential& model, const data::Dataset& train,
                                                const FitOptions& options) const {
  return fit_parameter_server(model, train, {.fit = options}).fit;
}

std::string ParameterServerStrategy::header_line(bool across_processes, int ranks) const {
  const Strategy& strategy = description();
  const std::string bound =
      strategy.max_staleness ? fmt::format("max staleness {}", *strategy.max_staleness) : "unbounded staleness";
  if (across_processes) {
    return fmt::format("  parameter server: rank 0 on {}, {} worker ranks, {}\n", strategy.parameter_device, ranks - 1,
                       bound);
  }
  std::string workers;
  for (const std::string& device : strategy.devices) workers += (workers.empty() ? "" : ",") + device;
  return fmt::format("  parameter server on {}, {} asynchronous workers ({}), {}\n", strategy.parameter_device,
                     strategy.devices.size(), workers, bound);
}

std::vector<std::string> ParameterServerStrategy::named_devices() const {
  std::vector<std::string> used{description().parameter_device};
  used.insert(used.end(), description().devices.begin(), description().devices.end());
  return used;
}

bool ParameterServerStrategy::spans_processes() const { return distribute::parameter_server_job(); }

runtime::MemoryPlan ParameterServerStrategy::plan(Sequential& model, std::int64_t batch_size,
                                                  std::string_view /*batches_on*/) const {
  return plan_parameter_server(model, batch_size);
}

}  // namespace tp::train

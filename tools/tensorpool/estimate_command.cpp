// SPDX-License-Identifier: Apache-2.0
// tensorpool estimate [model flags] [--json]: the per-tensor memory of one training step of the Keras-example
// MLP, per device, from the static plan, before anything runs. Nothing is allocated on the devices (checked:
// the command fails if their allocation counters moved). Under mpirun with --strategy multi_worker every worker
// plans its own step (with ZeRO, its own shard) and rank 0 prints it: the workers' plans differ only in names.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "model_setup.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/report/memory_estimate.hpp"
#include "tensorpool/report/profile_output.hpp"

namespace tp::cli {
namespace {

struct EstimateArguments {
  ModelArguments model;
  bool json = false;
};

void run_estimate(const EstimateArguments& arguments) {
  const ModelSetup setup = configure_model_devices(arguments.model, "estimate");
  std::unique_ptr<train::Sequential> model = build_mlp(arguments.model, setup);
  // The parameter-server strategy plans its variables on --ps-device as well as the workers' steps. Batches
  // live where `train` assembles them: on a device with shared memory, its steps read them in place.
  const std::vector<device::Device*> devices = report::named_devices(*setup.manager, setup.used_devices());
  const runtime::MemoryPlan plan =
      setup.distribution->plan(*model, arguments.model.batch_size, setup.batch_device().name());
  const report::MemoryEstimate estimate = report::estimate_memory(plan, *model, devices, arguments.model.batch_size);
  for (device::Device* device : devices) {
    if (device->memory().stats().num_allocs != 0) {  // the contract: an estimate touches no device memory
      TP_THROW(DeviceError, "estimate", "planning allocated on ", device->name(), "; this is a bug, please report it");
    }
  }
  if (setup.distribution->replicates_across_processes() && distribute::mpi_world().rank != 0) return;
  if (arguments.json) {
    std::cout << report::to_json(estimate).dump(2) << '\n';
  } else {
    report::print_estimate(std::cout, estimate);
  }
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  auto arguments = std::make_shared<EstimateArguments>();
  CLI::App* command =
      app.add_subcommand("estimate", "per-tensor memory of a training step, from the static plan, before running");
  add_model_options(*command, arguments->model);
  command->add_flag("--json", arguments->json, "print JSON (snake_case keys, bytes as integers)");
  command->callback([arguments] { run_estimate(*arguments); });
}

}  // namespace tp::cli

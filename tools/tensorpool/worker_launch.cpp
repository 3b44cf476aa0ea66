// SPDX-License-Identifier: Apache-2.0
#include "worker_launch.hpp"

#include <optional>
#include <string>

#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"

namespace tp::cli {

void check_launch(const ModelArguments& arguments, const train::DistributionStrategy& strategy) {
  const std::optional<int> ranks = distribute::launcher_world_size();
  if (strategy.replicates_across_processes() && !ranks) {
    TP_THROW(InvalidArgument, "train",
             "--strategy multi_worker runs one worker per process of an mpirun job, but this process was not "
             "started by mpirun, so it would train alone; launch the workers with e.g. 'mpirun -np 2 tensorpool "
             "train --strategy multi_worker --devices sim:0', or use --strategy mirrored for several devices in "
             "one process");
  }
  if (strategy.single_process() && ranks && *ranks > 1) {
    TP_THROW(InvalidArgument, "train", "--strategy ", arguments.strategy, " was started as one of ", *ranks,
             " mpirun processes: each would train the whole job alone and all would write into one "
             "--checkpoint-dir; use --strategy multi_worker to train one model across the processes, or run "
             "without mpirun");
  }
}

std::vector<distribute::JobSetting> shared_model_settings(const ModelArguments& arguments,
                                                          const train::DistributionStrategy& distribution) {
  const train::Strategy& strategy = distribution.description();
  std::vector<distribute::JobSetting> settings{
      {.name = "--strategy",
       .value = std::string(distribution.name()),  // "ps" is an alias of parameter_server
       .shown = arguments.strategy},
      {.name = "--batch-size", .value = std::to_string(arguments.batch_size), .shown = {}},
      {.name = "--hidden", .value = arguments.hidden, .shown = {}},
      {.name = "--precision", .value = arguments.precision, .shown = {}},
      {.name = "--seed", .value = std::to_string(arguments.seed), .shown = {}}};
  if (distribution.replicates_across_processes()) {
    // Replica g = rank x local devices + local: the workers' device counts must agree, not their names.
    settings.push_back({.name = "--devices",
                        .value = std::to_string(strategy.devices.size()),
                        .shown = arguments.devices + " (" + std::to_string(strategy.devices.size()) +
                                 (strategy.devices.size() == 1 ? " device)" : " devices)")});
    settings.push_back({.name = "--shard", .value = arguments.shard, .shown = {}});
    settings.push_back(
        {.name = "--bucket-size", .value = std::to_string(strategy.bucket_bytes), .shown = arguments.bucket_size});
  }
  return settings;
}

void require_same_flags(const std::vector<distribute::JobSetting>& settings) {
  distribute::require_same_settings(settings, "train", "start every worker with the same flags");
}

}  // namespace tp::cli

// SPDX-License-Identifier: Apache-2.0
#include "train/strategies/multi_worker_strategy.hpp"

#include <fmt/format.h>

#include <span>

#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/job_settings.hpp"
#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/train/checkpoint.hpp"
#include "tensorpool/train/fit.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::train {

std::vector<std::string> MultiWorkerStrategy::resolve_devices(device::DeviceManager& manager,
                                                              const CompileOptions& options,
                                                              const std::vector<Dense>& layers) {
  std::vector<std::string> devices = MirroredStrategy::resolve_devices(manager, options, layers);
  const distribute::MpiWorld& world = distribute::mpi_world();  // throws when built without MPI
  workers_ = world.size;
  rank_ = world.rank;
  return devices;
}

void MultiWorkerStrategy::check_sharding(std::size_t devices) const {
  const Shard shard = description().shard;
  if (shard == Shard::none) return;
  if (devices != 1) {
    TP_THROW(InvalidArgument, "train", "shard = ", name_of(shard),
             " across workers takes one device per worker (the MPI collectives shard per worker); this worker "
             "has ",
             devices, ": run one process per device (mpirun -np <devices>, --devices sim:0)");
  }
  if (workers_ < 2) {
    TP_THROW(InvalidArgument, "train", "shard = ", name_of(shard),
             " with the multi-worker strategy needs two or more workers (mpirun -np 2 or more); this job has ",
             workers_);
  }
}

void MultiWorkerStrategy::check_step(StepCall call) const {
  if (call == StepCall::launch) {
    TP_THROW(InvalidArgument, "train",
             "launch_train_step under the multi-worker strategy: its steps exchange data on the host between steps; "
             "call train_step");
  }
}

void MultiWorkerStrategy::reduce_step_result(double& loss, double& correct) const {
  if (workers_ <= 1) return;
  double sums[2] = {loss, correct};  // each worker holds its replicas' share; the step's figures are the sums
  distribute::mpi_sum(sums, 2);
  loss = sums[0];
  correct = sums[1];
}

// Under ZeRO across workers `name` is this worker's "shard_<k>/<slot>" (one device per worker: k = rank): every
// worker's "shard_<q>/<slot>" is gathered over MPI (each worker's shard has the same float32 size).
void MultiWorkerStrategy::append_variable(const std::string& name, const Tensor& value,
                                          std::vector<std::pair<std::string, Tensor>>& values) const {
  if (workers_ <= 1 || description().shard == Shard::none || name.rfind("shard_", 0) != 0) {
    DistributionStrategy::append_variable(name, value, values);
    return;
  }
  const std::string slot = name.substr(name.find('/') + 1);
  const std::vector<float> mine = value.to_vector<float>();
  std::vector<float> all(mine.size() * static_cast<std::size_t>(workers_));
  distribute::mpi_all_gather(mine.data(), mine.size() * sizeof(float), all.data());
  for (int worker = 0; worker < workers_; ++worker) {
    const std::span<const float> shard(all.data() + static_cast<std::size_t>(worker) * mine.size(), mine.size());
    values.emplace_back("shard_" + std::to_string(worker) + "/" + slot,
                        Tensor::from_vector<float>(shard, value.shape(), value.device()));
  }
}

// Every worker resumes from the same point (the same checkpoint directory, which they all see), or all start
// fresh; otherwise their step counts, and so their collectives, would differ. Collective.
void MultiWorkerStrategy::before_restore(const FitOptions& options, const std::optional<CheckpointState>& state) const {
  std::string start = "none", shown = "starts without a checkpoint directory";
  if (state) {
    start = fmt::format("step {} epoch {} batch {}", state->step, state->epoch, state->batch_in_epoch);
    shown = fmt::format("resumes from step {} (epoch {}, batch {}) in {}", state->step, state->epoch + 1,
                        state->batch_in_epoch, options.checkpoint_dir.string());
  } else if (!options.checkpoint_dir.empty()) {
    start = "fresh";
    shown = "starts fresh (no checkpoint in " + options.checkpoint_dir.string() + ")";
  }
  const std::vector<distribute::JobSettingDifference> differences =
      distribute::compare_with_rank0({{.name = "start", .value = start, .shown = shown}});
  if (differences.empty()) return;
  std::string text;
  for (const distribute::JobSettingDifference& difference : differences) {
    text += fmt::format("{}worker rank {} {}, rank 0 {}", text.empty() ? "" : "; ", difference.rank, difference.value,
                        difference.rank0_value);
  }
  TP_THROW(InvalidArgument, "train", text,
           ": give every worker the same checkpoint directory (--checkpoint-dir), one that all of them see");
}

// Rank 0's variables (fresh or resumed) become every worker's, so the replicas start alike.
void MultiWorkerStrategy::after_restore(Sequential& model) const { model.broadcast_variables(0); }

}  // namespace tp::train

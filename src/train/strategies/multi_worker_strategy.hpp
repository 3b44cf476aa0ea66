// SPDX-License-Identifier: Apache-2.0
#pragma once
// MultiWorkerStrategy (Strategy::multi_worker, TensorFlow's MultiWorkerMirroredStrategy): mirrored across the
// processes of an mpirun job. Its collectives: the gradients' AllReduce (or ZeRO's reduce-scatter and
// all-gather) through MPI, each step's loss and correct count summed over the workers, rank 0's variables
// broadcast before the first step, and, under ZeRO, every worker's optimizer-state shard gathered into each
// checkpoint (so every worker captures at the same points). Steps exchange figures on the host, so fit() does
// not pipeline them, and every worker must start from the same checkpoint.

#include "train/strategies/mirrored_strategy.hpp"

namespace tp::train {

class MultiWorkerStrategy final : public MirroredStrategy {
 public:
  using MirroredStrategy::MirroredStrategy;

  int workers() const noexcept override { return workers_; }
  int rank() const noexcept override { return rank_; }
  std::string_view name() const override { return "multi_worker"; }
  bool single_process() const override { return false; }
  bool replicates_across_processes() const override { return true; }

  void check_step(StepCall call) const override;
  void reduce_step_result(double& loss, double& correct) const override;
  void append_variable(const std::string& name, const Tensor& value,
                       std::vector<std::pair<std::string, Tensor>>& values) const override;
  bool collective_checkpoint() const override { return description().shard != Shard::none; }
  void before_restore(const FitOptions& options, const std::optional<CheckpointState>& state) const override;
  void after_restore(Sequential& model) const override;
  bool host_exchange_per_step() const override { return true; }

 protected:
  // This worker's devices; joins the MPI world (throws when built without MPI). The collective (mpi or nccl)
  // is settled and checked by prepare() (choose_all_reduce).
  std::vector<std::string> resolve_devices(device::DeviceManager& manager, const CompileOptions& options,
                                           const std::vector<Dense>& layers) override;
  // ZeRO across workers: one device per worker (the MPI collectives shard per worker), two or more workers.
  void check_sharding(std::size_t devices) const override;

 private:
  int workers_ = 1;  // the MPI world's size and this process's rank, set by resolve_devices
  int rank_ = 0;
};

}  // namespace tp::train

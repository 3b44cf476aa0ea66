// SPDX-License-Identifier: Apache-2.0
#pragma once
// DistributionStrategy: the one class that implements a distribution strategy (train/strategy.hpp describes
// them), as TensorFlow's tf.distribute.Strategy extended. Sequential::compile makes one from the user's
// `Strategy` (make_distribution_strategy) and asks it, and only it, everything that differs between strategies:
//   compile:    prepare() resolves and checks the devices the model's replicas run on (and joins the MPI job);
//               add_update_stage() builds the graph's stage after the backward pass: how the replicas'
//               gradients meet (AllReduce buckets, ZeRO's reduce-scatter and all-gather, or nothing) and the
//               optimizer's updates (train/model_graph.hpp's stages build_forward / build_backward come first);
//   steps:      check_step() refuses step calls the strategy cannot serve; reduce_step_result() combines the
//               step's loss and correct count over processes;
//   checkpoint: append_variable() names a variable in a checkpoint (and gathers a worker's shards);
//   fit():      runs_own_loop() / fit_own_loop() (the parameter server's asynchronous workers), before_restore()
//               (the workers' same-start check), after_restore() (broadcast of rank 0's variables),
//               host_exchange_per_step() (steps cannot be pipelined), collective_checkpoint();
//   tools:      name(), header_line(), named_devices(), single_process(), replicates_across_processes(),
//               spans_processes(), plan(): what the CLI asks instead of switching on Strategy::Kind.
// Invariant: an instance is immutable after prepare(); the hooks are const and may run on any thread that owns
// the model. Adding a strategy: docs/architecture.md, "Checklist: adding a strategy".

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/runtime/memory_plan.hpp"
#include "tensorpool/train/layers.hpp"
#include "tensorpool/train/strategy.hpp"

namespace tp::device {
class DeviceManager;
}
namespace tp::data {
class Dataset;
}

namespace tp::train {

class Sequential;
struct CompileOptions;
struct FitOptions;
struct FitResult;
struct CheckpointState;
struct ModelSpec;      // train/model_graph.hpp (internal)
struct ModelGraph;     // train/model_graph.hpp (internal)
struct GradientStage;  // train/model_graph.hpp (internal)

// The step calls a strategy may refuse (check_step).
enum class StepCall { train, launch };

class DistributionStrategy {
 public:
  // Shard::automatic stays only in a mirrored description (the update stage settles it); other kinds get none.
  explicit DistributionStrategy(Strategy description) : description_(std::move(description)) {
    if (description_.kind != Strategy::Kind::mirrored && description_.shard == Shard::automatic) {
      description_.shard = Shard::none;
    }
  }
  virtual ~DistributionStrategy() = default;
  DistributionStrategy(const DistributionStrategy&) = delete;
  DistributionStrategy& operator=(const DistributionStrategy&) = delete;

  // What the user asked for.
  const Strategy& description() const noexcept { return description_; }

  // --- compile ---
  // The devices of this process's replicas (the graph's), checked: the strategy's own checks, then
  // bucket_bytes > 0, then its sharding. Throws tp::InvalidArgument naming the setting and what works.
  [[nodiscard]] std::vector<std::string> prepare(device::DeviceManager& manager, const CompileOptions& options,
                                                 const std::vector<Dense>& layers);
  // Processes of the job and this one's rank (a multi-worker job's MPI world; else 1 and 0).
  virtual int workers() const noexcept { return 1; }
  virtual int rank() const noexcept { return 0; }
  // Adds the stage after the backward pass to `model`: the gradients' aggregation and the optimizer's updates
  // (model.updates, each replica's optimizer state in model.variables, all_finite under loss scaling).
  virtual void add_update_stage(const ModelSpec& spec, const std::vector<std::string>& devices,
                                const GradientStage& gradients, ModelGraph& model) const = 0;

  // --- steps ---
  // Throws tp::InvalidArgument when the strategy cannot serve `call` (the default serves both).
  virtual void check_step(StepCall call) const;
  // The step's loss and correct count summed over this process's replicas; becomes the job's (default: as is).
  virtual void reduce_step_result(double& loss, double& correct) const;

  // --- checkpoints ---
  // Appends the checkpoint entries of graph variable `name` (value read from the session): by default the name
  // without its "replica_<r>/" prefix.
  virtual void append_variable(const std::string& name, const Tensor& value,
                               std::vector<std::pair<std::string, Tensor>>& values) const;
  // Every process must capture checkpoints at the same points (a capture runs collectives).
  virtual bool collective_checkpoint() const { return false; }

  // --- fit() ---
  // The strategy trains with its own loop (fit_own_loop) instead of fit()'s synchronous steps.
  virtual bool runs_own_loop() const { return false; }
  virtual FitResult fit_own_loop(Sequential& model, const data::Dataset& train, const FitOptions& options) const;
  // Before the checkpoint (`state`, if any) is restored: e.g. every worker resumes from the same point.
  virtual void before_restore(const FitOptions& options, const std::optional<CheckpointState>& state) const;
  // After the restore, before the first step: e.g. the workers take rank 0's variables.
  virtual void after_restore(Sequential& model) const;
  // Each step exchanges data on the host (fit() waits for each step before launching the next).
  virtual bool host_exchange_per_step() const { return false; }

  // --- tools ---
  virtual std::string_view name() const = 0;  // "one", "mirrored", "multi_worker", "parameter_server"
  // A line for the run's header after the common one ("" when there is nothing to add).
  virtual std::string header_line(bool across_processes, int ranks) const;
  // Every device the strategy uses (the parameter device too).
  virtual std::vector<std::string> named_devices() const { return description_.devices; }
  // The job must not be one of several mpirun processes (each would train alone).
  virtual bool single_process() const { return false; }
  // One model replicated over the processes of an mpirun job (which must launch it, with the same settings).
  virtual bool replicates_across_processes() const { return false; }
  // This process is one of several of the job (collectives or messages across processes).
  virtual bool spans_processes() const { return replicates_across_processes(); }
  // The memory plan of training `model` at `batch_size` (Sequential::plan by default).
  virtual runtime::MemoryPlan plan(Sequential& model, std::int64_t batch_size, std::string_view batches_on) const;

  // "replica_<r>/<name>" -> "<name>"; other names as they are.
  static std::string checkpoint_name(const std::string& name);

 protected:
  // prepare()'s steps: the devices (and the strategy's own checks), then its sharding check (by default: none
  // allowed).
  virtual std::vector<std::string> resolve_devices(device::DeviceManager& manager, const CompileOptions& options,
                                                   const std::vector<Dense>& layers) = 0;
  virtual void check_sharding(std::size_t devices) const;
  // `description().devices`, checked to exist; empty: every accelerator (cpu:0 when there is none).
  std::vector<std::string> listed_or_accelerators(device::DeviceManager& manager) const;

 private:
  Strategy description_;
};

// The implementation of `strategy` (src/train/strategies/). Cheap; checks nothing until prepare().
[[nodiscard]] std::unique_ptr<DistributionStrategy> make_distribution_strategy(const Strategy& strategy);

}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Distribution strategies: where a model's replicas run and how their gradients meet.
//
// `Strategy` is the user's description (its constructors below); Sequential::compile hands it to
// make_distribution_strategy (train/distribution_strategy.hpp), which returns the one class that implements
// it (src/train/strategies/): the devices it resolves, the graph's gradient-aggregation and update stage, its
// collectives, its checkpoint layout and its fit-loop hooks. Nothing else switches on `kind`.
//   one:      OneDeviceStrategy: one replica on one device.
//   mirrored: MirroredStrategy: one replica per device, variables replicated (identically initialised), the
//             global batch split between replicas, each replica's forward and backward on its device's
//             stream, gradients all-reduced (ring, or reduction to one device) and the same update applied
//             everywhere; each replica's loss is scaled by the global batch, so the sum is the global mean.
//   multi_worker: MultiWorkerMirroredStrategy: mirrored across the processes of an `mpirun` job (one
//             worker each, with its local devices): every worker feeds the same global batch and takes its
//             replicas' rows of it (replica index = rank x local devices + local index), gradients are summed
//             over every replica of every worker (local ring, then MPI), the step's loss and correct count
//             are summed over the workers for reporting.
//   parameter_server: ParameterServerStrategy (asynchronous; train/parameter_server.hpp): the variables and the
//             optimizer state live on one parameter-server device (`parameter_device`); each worker device
//             (`devices`) runs its own loop without waiting for the others: pull the variables, compute the
//             loss and gradients of its own batch (its shard of the data), push the gradients, which the server
//             applies one at a time as they arrive. `max_staleness` K bounds how far workers drift apart: a
//             worker that has pushed c gradients starts its next step only once every running worker has
//             pushed at least c - K (absent: unbounded). Under mpirun, rank 0 is the server, ranks 1.. workers.
// Gradient buckets (mirrored, multi_worker): the gradients are all-reduced in buckets of at most
// `bucket_bytes` (25 MiB by default, as PyTorch DDP; a larger gradient gets a bucket of its own), filled from
// the last layer back, the order the backward pass produces them, one AllReduce per bucket (and per gradient
// dtype). Small gradients share one collective; with inter-op threads a bucket's AllReduce can start as soon
// as its gradients exist, while the backward pass goes on.
// Sharding (ZeRO; mirrored, or multi_worker with one device per worker): `optimizer` (ZeRO-1) keeps 1/R of
// the optimizer state on each of the job's R replicas:
// gradients all-reduced, each replica updates its shard of the parameters, then the parameters are
// all-gathered. `gradients` (ZeRO-2) reduce-scatters the gradients instead, so each replica also holds only
// its shard of the reduced gradients. Shards: parameters laid end to end, ceil(N / R) elements each.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tp::train {

// ZeRO (train/sharded_update.hpp). automatic ("auto"): for the mirrored strategy, optimizer (ZeRO-1) where
// the Adam update folds the all-reduce in (Strategy::fuse_update's AllReduceAdam: Adam without loss scaling,
// float32 gradients, the ring, two or more distinct sim devices), since its sharded form is then the fastest
// update and holds half the optimizer state; none wherever it does not fold, and for every other strategy
// (DistributionStrategy's description holds none then). Sequential::shard() tells which was built.
enum class Shard { none, optimizer, gradients, automatic };

// "none", "optimizer", "gradients" or "auto"; anything else throws tp::InvalidArgument naming it.
Shard parse_shard(std::string_view text);
std::string_view name_of(Shard shard);

// The collective that sums gradients: the communicator an AllReduce node runs with (its "algorithm").
//   ring:          ring all-reduce between the replicas' devices (mirrored's default).
//   reduce_to_one: every replica's gradients summed on the first device, then copied back.
//   mpi:           across the processes of an mpirun job (multi_worker: a local ring, then MPI).
//   nccl:          NVIDIA's NCCL between cuda devices on distinct GPUs (mirrored), or across the workers of an
//                  mpirun job (multi_worker); distribute/nccl.hpp.
//   none:          no collective (parameter_server: the server applies each worker's gradients itself).
//   automatic ("auto", the mirrored and multi_worker default): settled when the strategy is prepared, from the
//                  devices (choose_all_reduce).
enum class AllReduce { ring, reduce_to_one, mpi, none, nccl, automatic };

// "ring", "reduce_to_one", "mpi", "nccl", "none" or "auto"; anything else throws tp::InvalidArgument naming it.
[[nodiscard]] AllReduce parse_all_reduce(std::string_view text);
[[nodiscard]] std::string_view name_of(AllReduce algorithm);

struct Strategy {
  enum class Kind { one, mirrored, multi_worker, parameter_server };
  Kind kind = Kind::one;
  std::vector<std::string> devices{};           // empty: the first accelerator (one) or every accelerator (mirrored)
  AllReduce all_reduce = AllReduce::ring;       // mirrored: ring, reduce_to_one, nccl; multi_worker: mpi, nccl
  Shard shard = Shard::none;                    // mirrored, multi_worker (one device per worker)
  std::string parameter_device{};               // parameter_server: where the variables and optimizer state live
  std::optional<std::int64_t> max_staleness{};  // parameter_server: the bound K (>= 0); absent: unbounded
  std::int64_t bucket_bytes = kDefaultBucketBytes;  // mirrored, multi_worker: > 0
  // mirrored with Adam on sim devices (no ZeRO, no loss scaling, the ring all-reduce): each replica's update
  // reads every replica's gradient in place and sums it as it goes (the AllReduceAdam op), instead of an
  // AllReduce into a bucket that the update then reads; bitwise the same variables, no bucket in the plan.
  // With 16-bit gradients (mixed_bfloat16; also one replica on a cpu or sim device) the update keeps persistent
  // bfloat16 copies of the weights that the layers read, instead of a Cast of each weight every step
  // (docs/mixed-precision.md). On by default, as in `tensorpool train` (false: the AllReduce and ApplyAdam nodes).
  bool fuse_update = true;
  // Every strategy: the optimizer updates of one device (plain ApplyAdam or ApplySgd, one per variable) grouped
  // into one multi-tensor node (ApplyAdamMulti / ApplySgdMulti) where every device's backend has the kernels,
  // so a step launches one update kernel per device; bitwise the same training. On by default, as in
  // `tensorpool train` (false: one update node per variable).
  bool multi_tensor_update = true;

  static constexpr std::int64_t kDefaultBucketBytes = std::int64_t{25} << 20;

  static Strategy one_device(const std::string& device = {}) {
    return {Kind::one,
            device.empty() ? std::vector<std::string>{} : std::vector<std::string>{device},
            AllReduce::ring,
            Shard::none,
            {},
            std::nullopt};
  }
  static Strategy mirrored(std::vector<std::string> devices = {}, AllReduce all_reduce = AllReduce::automatic,
                           Shard shard = Shard::none) {
    return {Kind::mirrored, std::move(devices), all_reduce, shard, {}, std::nullopt};
  }
  // `all_reduce` by name ("auto", "ring", "reduce_to_one", "nccl"); an unknown name throws tp::InvalidArgument.
  static Strategy mirrored(std::vector<std::string> devices, std::string_view all_reduce, Shard shard = Shard::none) {
    return mirrored(std::move(devices), parse_all_reduce(all_reduce), shard);
  }
  // `devices`: this worker's (empty: its accelerators); the collective crosses the workers through MPI, or
  // NCCL for cuda devices (AllReduce::automatic; choose_all_reduce).
  static Strategy multi_worker(std::vector<std::string> devices = {}, Shard shard = Shard::none,
                               AllReduce all_reduce = AllReduce::automatic) {
    return {Kind::multi_worker, std::move(devices), all_reduce, shard, {}, std::nullopt};
  }
  // `workers`: the worker devices (each computes gradients on its shard of the data); `parameter_device` holds
  // the variables. Checked at compile(): at least one worker, existing devices, max_staleness >= 0.
  static Strategy parameter_server(std::vector<std::string> workers, std::string parameter_device = "cpu:0",
                                   std::optional<std::int64_t> max_staleness = std::nullopt) {
    return {Kind::parameter_server,      std::move(workers), AllReduce::none, Shard::none,
            std::move(parameter_device), max_staleness};
  }
};

// The collective a strategy of `kind` asked for `requested` runs with, given the physical device of each of
// this process's replicas, and why (a line for the log). AllReduce::automatic settles to nccl where NCCL can
// serve: mirrored over two or more cuda devices each on a GPU of its own, multi_worker whose local devices are
// all cuda devices on distinct GPUs; otherwise to ring (mirrored; logical devices sharing one GPU keep the
// in-process collectives, whose peer kernels read each other's memory, since NCCL refuses two participants on
// one GPU) or mpi (multi_worker). Other kinds keep what they hold. An explicit nccl over devices NCCL cannot
// serve, mpi outside multi_worker, or ring/reduce_to_one under multi_worker throw tp::InvalidArgument naming
// the devices and the fix. (DistributionStrategy::prepare then keeps a mirrored auto on the ring, with a
// warning, when NCCL cannot be loaded.)
struct AllReduceChoice {
  AllReduce all_reduce = AllReduce::ring;
  std::string reason;
};
[[nodiscard]] AllReduceChoice choose_all_reduce(Strategy::Kind kind, AllReduce requested,
                                                const std::vector<std::string>& devices,
                                                const std::vector<std::string>& physical_devices);

}  // namespace tp::train

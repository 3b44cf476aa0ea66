// SPDX-License-Identifier: Apache-2.0
#pragma once
// Asynchronous parameter-server training (Strategy::parameter_server), as TensorFlow's ParameterServerStrategy
// and classic asynchronous SGD.
//
// The server holds the float32 variables and the optimizer state on its device and owns a version: the number
// of updates applied. Each worker (a device in-process, or an MPI rank) loops over its own shard of the data
// without waiting for the others: pull the variables (and the version v they carry), compute the loss and
// gradients of its batch on its device, push them. The server applies each pushed gradient as it arrives, one
// at a time under one lock (variables are never torn), with the model's optimizer (Adam's step = the new
// version), and records the update's staleness = version at apply - v.
//
// Bounded staleness (max_staleness K): a worker that has pushed c gradients pulls for its next step only once
// every running worker has pushed at least c - K (finished workers no longer count). Then, with N workers, an
// update's staleness is at most (N - 1)(2K + 1): while a worker computes step c + 1, each other worker can
// push at most 2K + 1 updates (from at least c - K pushed to at most c + K + 1). K = 0 runs in rounds
// (staleness <= N - 1); one worker always has staleness 0 and trains exactly as one device would on the same
// batches. Without a bound a slow worker never holds the others back.
//
// Data: worker w of W takes shard w of W of the training dataset (composed with any shard the dataset already
// has), runs `epochs` epochs over it with the dataset's batch size. The history's epoch e aggregates the
// updates of every worker's epoch e; validation runs once, after training.
//
// Under mpirun (world size > 1) rank 0 is the server and ranks 1..N-1 the workers (worker rank r computes on
// the model strategy's devices[(r - 1) % devices]); only rank 0 evaluates, writes checkpoints and reports.

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "tensorpool/runtime/memory_plan.hpp"
#include "tensorpool/train/fit.hpp"

namespace tp::device {
class DeviceManager;
}

namespace tp::train {

// One applied update, in the order the server applied them.
struct UpdateRecord {
  std::int32_t worker = 0;           // 0-based worker index (MPI: rank - 1)
  std::int64_t worker_step = 0;      // the worker's own step, from 1
  std::int64_t epoch = 0;            // the worker's epoch
  std::int64_t pulled_version = 0;   // the version the worker computed the gradients from
  std::int64_t applied_version = 0;  // the version the update created (pulled_version + staleness + 1)
  std::int64_t staleness = 0;        // updates applied between the pull and this update
  double loss = 0;                   // the batch's mean loss
  double correct = 0;
  std::int64_t examples = 0;
};

struct StalenessStats {
  double mean = 0;
  std::int64_t max = 0;
  std::int64_t p50 = 0, p90 = 0, p99 = 0;
};
[[nodiscard]] StalenessStats staleness_stats(const std::vector<UpdateRecord>& updates);

struct ParameterServerOptions {
  FitOptions fit{};  // epochs, validation (after training), callbacks (epoch ends, after training), checkpoints
  // Test hook, called by worker `worker` before each of its steps (from 1), on its thread (in-process) or
  // process (MPI): e.g. a delay that makes one worker slow.
  std::function<void(std::int32_t worker, std::int64_t step)> before_step{};
};

struct ParameterServerResult {
  FitResult fit{};                           // steps = updates applied (resumed ones included)
  std::vector<UpdateRecord> updates{};       // applied now, in order (MPI: on rank 0 only)
  std::vector<std::int64_t> worker_steps{};  // steps each worker ran
};

// Trains `model` (compiled with Strategy::parameter_server) and leaves the final variables in it. With a
// checkpoint directory it resumes from the latest checkpoint's variables and version and saves one at the end.
ParameterServerResult fit_parameter_server(Sequential& model, const data::Dataset& train,
                                           const ParameterServerOptions& options = {});

// The memory plan of parameter-server training of `model` at `batch_size`, before anything runs (nothing is
// allocated on the devices): the parameter device holds the model's variables (parameters and optimizer
// state; no step arena: the server runs no step; the store's working copy of them and the gradients workers
// push, which the server holds while it applies them, are not planned), and each worker
// device its own copy of the parameters and the arena of its step (forward, backward and the gradients it
// pushes) on whole batches of `batch_size` examples, which each worker takes from its shard of the data.
[[nodiscard]] runtime::MemoryPlan plan_parameter_server(Sequential& model, std::int64_t batch_size);

// Sequential::compile's check of a parameter-server strategy: at least one worker device, existing distinct
// devices, the server's device not a worker's, max_staleness >= 0, float32 layers, no ZeRO sharding. Throws
// tp::InvalidArgument naming the setting and what works.
void check_parameter_server(const Strategy& strategy, const CompileOptions& options, const std::vector<Dense>& layers,
                            device::DeviceManager& manager);

}  // namespace tp::train

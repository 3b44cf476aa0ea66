// SPDX-License-Identifier: Apache-2.0
// The in-process parameter-server run (one thread per worker device) and what it shares with the MPI run.
#include "tensorpool/train/parameter_server.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/distribute/parameter_transport.hpp"
#include "tensorpool/train/checkpoint.hpp"
#include "train/checkpoint_restore.hpp"
#include "train/gradient_worker.hpp"
#include "train/parameter_server_run.hpp"

namespace tp::train {

namespace {

using Clock = std::chrono::steady_clock;

device::Device& device_of(Sequential& model, const std::string& name) {
  const runtime::SessionOptions& options = model.session().options();
  return (options.devices != nullptr ? *options.devices : device::DeviceManager::instance()).device(name);
}

}  // namespace

void check_parameter_server(const Strategy& strategy, const CompileOptions& options, const std::vector<Dense>& layers,
                            device::DeviceManager& manager) {
  if (strategy.devices.empty()) {
    TP_THROW(InvalidArgument, "train",
             "the parameter-server strategy needs at least one worker device (e.g. devices sim:0,sim:1)");
  }
  if (strategy.parameter_device.empty()) {
    TP_THROW(InvalidArgument, "train", "the parameter-server strategy needs a parameter device (e.g. cpu:0)");
  }
  manager.device(strategy.parameter_device);  // throws naming a missing device
  std::set<std::string> seen;
  for (const std::string& worker : strategy.devices) {
    manager.device(worker);
    if (!seen.insert(worker).second) {
      TP_THROW(InvalidArgument, "train", "parameter server: worker device ", worker,
               " is listed twice; give each worker its own device");
    }
    if (worker == strategy.parameter_device) {
      TP_THROW(InvalidArgument, "train", "parameter server: ", worker,
               " is both the parameter device and a worker device; put the variables on a device no worker uses "
               "(--ps-device in the CLI; cpu:0 by default) or drop it from the workers");
    }
  }
  if (strategy.max_staleness && *strategy.max_staleness < 0) {
    TP_THROW(InvalidArgument, "train", "parameter server: max_staleness ", *strategy.max_staleness,
             " must be >= 0 (0: workers move in rounds; leave it unset for unbounded asynchronous training)");
  }
  if (strategy.shard != Shard::none && strategy.shard != Shard::automatic) {
    TP_THROW(InvalidArgument, "train", "shard = ", name_of(strategy.shard),
             " does not apply to the parameter-server strategy (the server alone holds the optimizer state); use "
             "shard none");
  }
  const bool mixed = options.policy.is_mixed() || std::any_of(layers.begin(), layers.end(), [](const Dense& layer) {
                       return layer.policy && layer.policy->is_mixed();
                     });
  if (mixed) {
    TP_THROW(InvalidArgument, "train",
             "precision: the parameter-server strategy trains in float32 only; use precision float32, or mixed "
             "precision with the one-device or mirrored strategy");
  }
}

StalenessStats staleness_stats(const std::vector<UpdateRecord>& updates) {
  StalenessStats stats;
  if (updates.empty()) return stats;
  std::vector<std::int64_t> values;
  double sum = 0;
  for (const UpdateRecord& update : updates) {
    values.push_back(update.staleness);
    sum += static_cast<double>(update.staleness);
  }
  std::sort(values.begin(), values.end());
  const auto at = [&](double quantile) {
    return values[std::min(values.size() - 1, static_cast<std::size_t>(quantile * static_cast<double>(values.size())))];
  };
  stats.mean = sum / static_cast<double>(values.size());
  stats.max = values.back();
  stats.p50 = at(0.5);
  stats.p90 = at(0.9);
  stats.p99 = at(0.99);
  return stats;
}

ParameterServerStart resume_parameter_server(Sequential& model, const ParameterServerOptions& options) {
  ParameterServerStart start;
  if (options.fit.checkpoint_dir.empty()) return start;
  const std::optional<CheckpointState> state = load_latest_checkpoint(options.fit.checkpoint_dir);
  if (!state) return start;
  restore_checkpoint(model, *state, device_of(model, "cpu:0"), options.fit.checkpoint_dir);
  start.version = state->step;
  start.first_epoch = state->epoch;
  if (start.first_epoch >= options.fit.epochs) {
    TP_LOG(warning, "train", "nothing to train: the parameter server's checkpoint in ",
           options.fit.checkpoint_dir.string(), " is at update ", start.version, ", after epoch ", start.first_epoch,
           ", and epochs = ", options.fit.epochs,
           "; ask for more epochs to train on, or use another checkpoint directory to start afresh");
  } else {
    TP_LOG(info, "train", "parameter server resumed from update ", start.version, " (epoch ", start.first_epoch + 1,
           ") in ", options.fit.checkpoint_dir.string());
  }
  return start;
}

void finish_parameter_server(Sequential& model, const ParameterStore& store, const ParameterServerStart& start,
                             const ParameterServerOptions& options, const data::Dataset& train, double seconds,
                             ParameterServerResult& result) {
  model.assign_variables(store.variables());
  result.updates = store.updates();
  result.fit.steps = store.version();
  result.fit.resumed_from_step = start.version;
  result.fit.first_epoch = start.first_epoch;
  result.fit.train_seconds = seconds;
  CallbackList callbacks(options.fit.callbacks);
  callbacks.on_train_begin({.epochs = options.fit.epochs,
                            .initial_epoch = start.first_epoch,
                            .batches_per_epoch = train.batches_per_epoch(),
                            .samples_per_epoch = train.shard_size(),
                            .has_validation = options.fit.validation != nullptr});
  const std::int64_t epochs_run = std::max<std::int64_t>(0, options.fit.epochs - start.first_epoch);
  for (std::int64_t epoch = start.first_epoch; epoch < options.fit.epochs; ++epoch) {
    double loss = 0, correct = 0;
    std::int64_t samples = 0;
    for (const UpdateRecord& update : result.updates) {
      if (update.epoch != epoch) continue;
      loss += update.loss * static_cast<double>(update.examples);
      correct += update.correct;
      samples += update.examples;
    }
    result.fit.train_samples += samples;
    // Workers overlap epochs: each epoch is given an equal share of the run's wall time.
    const double epoch_seconds = seconds / static_cast<double>(epochs_run);
    EpochLogs logs{.epoch = epoch,
                   .loss = samples > 0 ? loss / static_cast<double>(samples) : 0.0,
                   .seconds = epoch_seconds,
                   .samples_per_second = epoch_seconds > 0 ? static_cast<double>(samples) / epoch_seconds : 0.0};
    if (model.has_accuracy() && samples > 0) logs.accuracy = correct / static_cast<double>(samples);
    if (options.fit.validation != nullptr && epoch + 1 == options.fit.epochs) {
      const Evaluation validation = evaluate(model, *options.fit.validation);
      logs.val_loss = validation.loss;
      if (model.has_accuracy()) logs.val_accuracy = validation.accuracy;
    }
    callbacks.on_epoch_begin(epoch);
    callbacks.on_epoch_end(logs);
    result.fit.history.epochs.push_back(logs);
  }
  callbacks.on_train_end(result.fit.history);
  if (!options.fit.checkpoint_dir.empty() && options.fit.write_checkpoints) {
    CheckpointState state;
    for (const auto& [name, tensor] : model.variables()) state.tensors[name] = to_host(tensor);
    state.step = result.fit.steps;
    state.epoch = std::max(options.fit.epochs, start.first_epoch);
    state.rng_seed = train.settings().shuffle_seed.value_or(0);
    state.metadata["strategy"] = "parameter_server";
    save_checkpoint(options.fit.checkpoint_dir, state);
  }
}

runtime::MemoryPlan plan_parameter_server(Sequential& model, std::int64_t batch_size) {
  const Strategy& strategy = model.strategy();
  if (strategy.kind != Strategy::Kind::parameter_server) {
    TP_THROW(InvalidArgument, "train",
             "plan_parameter_server needs a model compiled with Strategy::parameter_server; call plan() instead");
  }
  // The model's own graph lives on the parameter device; only its variables stay there during training.
  const runtime::MemoryPlan server = model.plan(batch_size);
  runtime::MemoryPlan plan;
  runtime::DevicePlan home{.device = strategy.parameter_device, .strategy = "parameter server: variables only"};
  for (const runtime::PlannedTensor& variable : server.variables) {
    if (variable.device != strategy.parameter_device) continue;
    home.variable_bytes += variable.bytes;
    plan.variables.push_back(variable);
  }
  home.planned_peak_bytes = home.variable_bytes;
  plan.devices.push_back(home);
  for (std::size_t index = 0; index < strategy.devices.size(); ++index) {
    GradientWorker worker(model, strategy.devices[index], "ps_worker_" + std::to_string(index));
    runtime::MemoryPlan part = worker.plan(batch_size);
    plan.devices.insert(plan.devices.end(), part.devices.begin(), part.devices.end());
    plan.tensors.insert(plan.tensors.end(), part.tensors.begin(), part.tensors.end());
    plan.variables.insert(plan.variables.end(), part.variables.begin(), part.variables.end());
    plan.placement_log.insert(plan.placement_log.end(), part.placement_log.begin(), part.placement_log.end());
    plan.steps = std::max(plan.steps, part.steps);
  }
  return plan;
}

ParameterServerResult fit_parameter_server(Sequential& model, const data::Dataset& train,
                                           const ParameterServerOptions& options) {
  const Strategy& strategy = model.strategy();
  if (strategy.kind != Strategy::Kind::parameter_server) {
    TP_THROW(InvalidArgument, "train",
             "fit_parameter_server needs a model compiled with Strategy::parameter_server; call fit() instead");
  }
  if (options.fit.epochs < 0) TP_THROW(InvalidArgument, "train", "epochs = ", options.fit.epochs, " must be >= 0");
  materialise_variables(model);
  const ParameterServerStart start = resume_parameter_server(model, options);
  if (distribute::parameter_server_job()) return fit_parameter_server_mpi(model, train, options, start);

  const auto workers = static_cast<std::int32_t>(strategy.devices.size());
  ParameterStore store(model.variables(), model.compile_options().optimizer,
                       device_of(model, strategy.parameter_device), start.version, workers, strategy.max_staleness);
  std::vector<std::unique_ptr<GradientWorker>> gradient_workers;
  for (std::int32_t index = 0; index < workers; ++index) {
    gradient_workers.push_back(std::make_unique<GradientWorker>(
        model, strategy.devices[static_cast<std::size_t>(index)], "ps_worker_" + std::to_string(index)));
  }
  LocalParameterSource source(store);
  ParameterServerResult result;
  result.worker_steps.assign(static_cast<std::size_t>(workers), 0);
  std::mutex error_mutex;
  std::exception_ptr first_error;  // the failure that aborted the others (theirs only say so)
  const auto begin = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (std::int32_t index = 0; index < workers; ++index) {
      threads.emplace_back([&, index] {
        const auto slot = static_cast<std::size_t>(index);
        try {
          result.worker_steps[slot] =
              run_worker_loop(*gradient_workers[slot], source, worker_shard(train, index, workers), index,
                              start.first_epoch, options.fit.epochs, options.before_step);
        } catch (...) {
          {
            std::lock_guard lock(error_mutex);
            if (!first_error) first_error = std::current_exception();
          }
          store.abort();
        }
      });
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  if (first_error) std::rethrow_exception(first_error);
  gradient_workers.clear();  // their sessions' device memory goes back before validation
  finish_parameter_server(model, store, start, options, train, seconds, result);
  return result;
}

}  // namespace tp::train

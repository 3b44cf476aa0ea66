// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/fit.hpp"

#include <fmt/format.h>

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/device/cuda_graphs.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/train/checkpoint.hpp"
#include "tensorpool/train/distribution_strategy.hpp"
#include "tensorpool/train/host_tensor.hpp"
#include "train/checkpoint_restore.hpp"

namespace tp::train {

namespace {

// FitOptions::cuda_graphs: capture on for the model's devices once the first step of the fit has finished,
// off again at the end of the scope. Every device is checked at construction, before anything trains, so a
// refusal leaves none on. The first step runs eagerly (PyTorch's warm-up before capture): what a first launch
// initialises lazily (a library handle, a kernel module) is done outside any capture.
class CudaGraphScope {
 public:
  CudaGraphScope(Sequential& model, bool on) {
    if (!on) return;
    device::DeviceManager& manager = *model.session().options().devices;
    for (const std::string& name : model.devices()) {
      device::Device& device = manager.device(name);
      if (device.kind() != device::DeviceKind::cuda) {
        TP_THROW(InvalidArgument, "train", "cuda_graphs = true (--cuda-graph true), but the model trains on ",
                 device.name(), ", a ", device::to_string(device.kind()),
                 " device: CUDA graphs exist only on cuda devices; train on cuda devices, or turn them off");
      }
      devices_.push_back(&device);
    }
  }
  ~CudaGraphScope() {
    if (!on_) return;
    for (device::Device* device : devices_) {
      try {
        device::set_cuda_graph_capture(*device, false);
      } catch (const Error&) {  // off on a cuda device does not throw; nothing to report from a destructor
      }
    }
  }
  CudaGraphScope(const CudaGraphScope&) = delete;
  CudaGraphScope& operator=(const CudaGraphScope&) = delete;

  // A training step has finished: capture goes on (once) for the steps launched from now on.
  void step_finished() {
    if (on_ || devices_.empty()) return;
    on_ = true;
    for (device::Device* device : devices_) device::set_cuda_graph_capture(*device, true);
  }

 private:
  std::vector<device::Device*> devices_;  // empty: graphs not asked for
  bool on_ = false;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

CheckpointState capture(Sequential& model, std::int64_t step, std::int64_t epoch, std::int64_t batch,
                        std::uint64_t seed) {
  CheckpointState state;
  for (const auto& [name, tensor] : model.variables()) state.tensors[name] = to_host(tensor);
  state.step = step;
  state.epoch = epoch;
  state.batch_in_epoch = batch;
  state.rng_seed = seed;
  return state;
}

// FitOptions::steps_in_flight, or 1 where a step needs the previous one's results or the host's exact state
// after each step: loss scaling (the next scale), per-step checkpoints, and strategies whose steps exchange data
// on the host (multi-worker: the host sums each step's figures over MPI, which must not run beside the device
// streams' collectives of the next step).
std::size_t pipelined_steps(const Sequential& model, const FitOptions& options) {
  if (options.steps_in_flight < 1) {
    TP_THROW(InvalidArgument, "train", "steps_in_flight = ", options.steps_in_flight,
             " must be >= 1 (1: each step is waited for before the next is launched)");
  }
  if (options.checkpoint_every_steps > 0 || model.loss_scale_state().has_value() ||
      model.distribution().host_exchange_per_step()) {
    return 1;
  }
  return static_cast<std::size_t>(options.steps_in_flight);
}

}  // namespace

Evaluation evaluate(Sequential& model, const data::Dataset& dataset) {
  const auto start = Clock::now();
  Evaluation evaluation;
  double loss_sum = 0;
  double correct = 0;
  data::BatchIterator batches = dataset.epoch(0);
  while (std::optional<data::Batch> batch = batches.next()) {
    const StepResult result = model.test_step(batch->features, batch->labels);
    loss_sum += result.loss * static_cast<double>(result.examples);
    correct += result.correct;
    evaluation.examples += result.examples;
  }
  if (evaluation.examples > 0) {
    evaluation.loss = loss_sum / static_cast<double>(evaluation.examples);
    evaluation.accuracy = correct / static_cast<double>(evaluation.examples);
  }
  evaluation.seconds = seconds_since(start);
  return evaluation;
}

FitResult fit(Sequential& model, const data::Dataset& train, const FitOptions& options) {
  const DistributionStrategy& strategy = model.distribution();
  CudaGraphScope cuda_graphs(model, options.cuda_graphs);
  if (strategy.runs_own_loop()) return strategy.fit_own_loop(model, train, options);  // e.g. asynchronous workers
  if (options.epochs < 0) TP_THROW(InvalidArgument, "train", "epochs = ", options.epochs, " must be >= 0");
  const std::size_t steps_in_flight = pipelined_steps(model, options);
  CallbackList callbacks(options.callbacks);
  FitResult result;
  std::int64_t step = 0, first_epoch = 0, first_batch = 0;
  const std::uint64_t seed = train.settings().shuffle_seed.value_or(0);
  std::optional<CheckpointState> state;
  if (!options.checkpoint_dir.empty()) state = load_latest_checkpoint(options.checkpoint_dir);
  strategy.before_restore(options, state);  // e.g. every worker resumes from the same point
  if (state) {
    restore_checkpoint(model, *state, model.session().options().devices->device("cpu:0"), options.checkpoint_dir);
    step = state->step;
    first_epoch = state->epoch;
    first_batch = state->batch_in_epoch;
    result.resumed_from_step = step;
    if (first_epoch >= options.epochs) {
      const std::string partial = first_batch > 0 ? fmt::format(" and {} batches", first_batch) : "";
      TP_LOG(warning, "train", "nothing to train: the checkpoint in ", options.checkpoint_dir.string(), " is at step ",
             step, ", after epoch ", first_epoch, partial, ", and epochs = ", options.epochs,
             "; ask for more epochs to train on, or use another checkpoint directory to start afresh");
    } else {
      TP_LOG(info, "train", "resumed from step ", step, " (epoch ", first_epoch + 1, ", batch ", first_batch, ") in ",
             options.checkpoint_dir.string());
    }
  }
  result.first_epoch = first_epoch;
  strategy.after_restore(model);  // e.g. rank 0's variables become every worker's, so the replicas start alike
  std::int64_t current_epoch = first_epoch, current_batch = first_batch;
  // When capturing runs collectives (ZeRO across workers gathers every worker's shard: Sequential::variables),
  // the ranks that do not write capture too, at the same points.
  const bool collective_capture = strategy.collective_checkpoint();
  if (!options.checkpoint_dir.empty() && (options.write_checkpoints || collective_capture)) {
    callbacks.add(std::make_shared<CheckpointCallback>(
        options.checkpoint_dir, [&] { return capture(model, step, current_epoch, current_batch, seed); },
        CheckpointCallbackOptions{.every_steps = options.checkpoint_every_steps, .write = options.write_checkpoints}));
  }
  const std::int64_t batches_per_epoch = train.batches_per_epoch();
  callbacks.on_train_begin({.epochs = options.epochs,
                            .initial_epoch = first_epoch,
                            .batches_per_epoch = batches_per_epoch,
                            .samples_per_epoch = train.shard_size(),
                            .has_validation = options.validation != nullptr});
  for (std::int64_t epoch = first_epoch; epoch < options.epochs; ++epoch) {
    callbacks.on_epoch_begin(epoch);
    const auto start = Clock::now();
    double loss_sum = 0, correct = 0;
    std::int64_t samples = 0;
    auto finish = [&](const StepResult& step_result, std::int64_t finished_step, std::int64_t batch_index) {
      loss_sum += step_result.loss * static_cast<double>(step_result.examples);
      correct += step_result.correct;
      samples += step_result.examples;
      current_epoch = epoch;
      current_batch = batch_index + 1;
      BatchLogs logs{.epoch = epoch,
                     .batch = batch_index,
                     .batches_per_epoch = batches_per_epoch,
                     .step = finished_step,
                     .loss = loss_sum / static_cast<double>(samples),
                     .samples = samples,
                     .elapsed_seconds = seconds_since(start)};
      if (model.has_accuracy()) logs.accuracy = correct / static_cast<double>(samples);
      callbacks.on_batch_end(logs);
      cuda_graphs.step_finished();
    };
    struct InFlight {
      PendingStep pending;
      std::int64_t step;
      std::int64_t batch_index;
    };
    std::deque<InFlight> in_flight;
    auto finish_oldest = [&] {
      InFlight oldest = std::move(in_flight.front());
      in_flight.pop_front();
      finish(oldest.pending.wait(), oldest.step, oldest.batch_index);
    };
    data::BatchIterator batches = train.epoch(epoch, epoch == first_epoch ? first_batch : 0);
    while (std::optional<data::Batch> batch = batches.next()) {
      ++step;
      if (steps_in_flight == 1) {
        finish(model.train_step(batch->features, batch->labels, step), step, batch->index);
        continue;
      }
      in_flight.push_back({model.launch_train_step(batch->features, batch->labels, step), step, batch->index});
      if (in_flight.size() >= steps_in_flight) finish_oldest();
    }
    while (!in_flight.empty()) finish_oldest();
    const double seconds = seconds_since(start);
    result.train_seconds += seconds;
    result.train_samples += samples;
    EpochLogs logs{.epoch = epoch,
                   .loss = samples > 0 ? loss_sum / static_cast<double>(samples) : 0.0,
                   .seconds = seconds,
                   .samples_per_second = seconds > 0 ? static_cast<double>(samples) / seconds : 0.0};
    if (model.has_accuracy() && samples > 0) logs.accuracy = correct / static_cast<double>(samples);
    if (options.validation != nullptr) {
      const Evaluation validation = evaluate(model, *options.validation);
      logs.val_loss = validation.loss;
      if (model.has_accuracy()) logs.val_accuracy = validation.accuracy;
    }
    current_epoch = epoch + 1;  // a checkpoint taken now resumes at the next epoch's start
    current_batch = 0;
    callbacks.on_epoch_end(logs);
    result.history.epochs.push_back(logs);
  }
  callbacks.on_train_end(result.history);
  result.steps = step;
  return result;
}

}  // namespace tp::train

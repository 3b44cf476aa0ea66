// SPDX-License-Identifier: Apache-2.0
#pragma once
// Callbacks: hooks a training loop calls at fixed points, as in Keras. The loop calls, in order:
//   on_train_begin, then per epoch: on_epoch_begin, on_batch_end after each optimizer step, on_epoch_end
//   (after validation); finally on_train_end with the whole history.
// Epochs and batches are 0-based indices, as Keras passes them; displays add 1 where people read them.
// Loss and accuracy in BatchLogs are running means over the epoch so far (what a progress bar shows).
//
// Implementations here: CheckpointCallback and CallbackList; the progress bar is in progress_bar.hpp, the
// CSV and JSON history loggers in history_logger.hpp.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tensorpool/train/checkpoint.hpp"

namespace tp::train {

struct TrainInfo {                     // {} initialisers: designated initialisers may name any subset
  std::int64_t epochs = 0;             // total epochs of the run
  std::int64_t initial_epoch = 0;      // first epoch run (> 0 when resuming)
  std::int64_t batches_per_epoch = 0;  // steps per epoch, 0 when unknown
  std::int64_t samples_per_epoch = 0;
  bool has_validation = false;
};

struct BatchLogs {
  std::int64_t epoch = 0;
  std::int64_t batch = 0;  // index of the batch that just ended
  std::int64_t batches_per_epoch = 0;
  std::int64_t step = 0;  // optimizer steps completed in the run, this one included
  double loss = 0.0;
  std::optional<double> accuracy{};  // absent when the model has no accuracy metric
  std::int64_t samples = 0;          // samples seen in this epoch so far
  double elapsed_seconds = 0.0;      // since this epoch began
};

struct EpochLogs {
  std::int64_t epoch = 0;
  double loss = 0.0;
  std::optional<double> accuracy{};
  std::optional<double> val_loss{};  // absent without validation data
  std::optional<double> val_accuracy{};
  double seconds = 0.0;
  double samples_per_second = 0.0;

  friend bool operator==(const EpochLogs&, const EpochLogs&) = default;
};

struct History {
  std::vector<EpochLogs> epochs{};  // in the order they ran

  friend bool operator==(const History&, const History&) = default;
};

// Every hook does nothing by default; override the ones you need.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(const TrainInfo& info);
  virtual void on_epoch_begin(std::int64_t epoch);
  virtual void on_batch_end(const BatchLogs& logs);
  virtual void on_epoch_end(const EpochLogs& logs);
  virtual void on_train_end(const History& history);
};

// Forwards each hook to its callbacks in the order they were added; null entries are rejected.
class CallbackList final : public Callback {
 public:
  CallbackList() = default;
  explicit CallbackList(std::vector<std::shared_ptr<Callback>> callbacks);
  void add(std::shared_ptr<Callback> callback);  // throws tp::InvalidArgument for nullptr
  std::size_t size() const noexcept { return callbacks_.size(); }

  void on_train_begin(const TrainInfo& info) override;
  void on_epoch_begin(std::int64_t epoch) override;
  void on_batch_end(const BatchLogs& logs) override;
  void on_epoch_end(const EpochLogs& logs) override;
  void on_train_end(const History& history) override;

 private:
  std::vector<std::shared_ptr<Callback>> callbacks_;  // invariant: no nullptr
};

struct CheckpointCallbackOptions {
  std::int64_t every_steps = 0;  // also save when BatchLogs::step is a multiple of this; 0: epoch ends only
  bool at_epoch_end = true;
  CheckpointOptions checkpoint{};
  // false: capture at the same points but write nothing. A multi-worker job's ranks other than 0 do so, since
  // capturing can be collective (ZeRO across workers gathers every worker's optimizer-state shard).
  bool write = true;
};

// Saves `capture()` into `directory` every `every_steps` optimizer steps and at each epoch end. The
// capture function runs right after the step or epoch it reports, so it sees the state to resume from.
// Errors from save_checkpoint propagate (a run that cannot checkpoint should stop, not lose work silently).
class CheckpointCallback final : public Callback {
 public:
  CheckpointCallback(std::filesystem::path directory, std::function<CheckpointState()> capture,
                     CheckpointCallbackOptions options = {});

  void on_batch_end(const BatchLogs& logs) override;
  void on_epoch_end(const EpochLogs& logs) override;

  // The file the last save wrote; empty before the first.
  const std::filesystem::path& last_saved() const noexcept { return last_saved_; }
  std::int64_t saves() const noexcept { return saves_; }

 private:
  void save();

  const std::filesystem::path directory_;
  const std::function<CheckpointState()> capture_;
  const CheckpointCallbackOptions options_;
  std::filesystem::path last_saved_;
  std::int64_t saves_ = 0;
};

}  // namespace tp::train

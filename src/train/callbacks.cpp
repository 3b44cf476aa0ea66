// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/callbacks.hpp"

#include <utility>

#include "tensorpool/core/error.hpp"

namespace tp::train {

void Callback::on_train_begin(const TrainInfo&) {}
void Callback::on_epoch_begin(std::int64_t) {}
void Callback::on_batch_end(const BatchLogs&) {}
void Callback::on_epoch_end(const EpochLogs&) {}
void Callback::on_train_end(const History&) {}

CallbackList::CallbackList(std::vector<std::shared_ptr<Callback>> callbacks) {
  for (auto& callback : callbacks) add(std::move(callback));
}

void CallbackList::add(std::shared_ptr<Callback> callback) {
  if (callback == nullptr) TP_THROW(InvalidArgument, "train", "CallbackList: a callback is null");
  callbacks_.push_back(std::move(callback));
}

void CallbackList::on_train_begin(const TrainInfo& info) {
  for (const auto& callback : callbacks_) callback->on_train_begin(info);
}
void CallbackList::on_epoch_begin(std::int64_t epoch) {
  for (const auto& callback : callbacks_) callback->on_epoch_begin(epoch);
}
void CallbackList::on_batch_end(const BatchLogs& logs) {
  for (const auto& callback : callbacks_) callback->on_batch_end(logs);
}
void CallbackList::on_epoch_end(const EpochLogs& logs) {
  for (const auto& callback : callbacks_) callback->on_epoch_end(logs);
}
void CallbackList::on_train_end(const History& history) {
  for (const auto& callback : callbacks_) callback->on_train_end(history);
}

CheckpointCallback::CheckpointCallback(std::filesystem::path directory, std::function<CheckpointState()> capture,
                                       CheckpointCallbackOptions options)
    : directory_(std::move(directory)), capture_(std::move(capture)), options_(options) {
  if (!capture_) TP_THROW(InvalidArgument, "train", "CheckpointCallback: the capture function is empty");
  if (options_.every_steps < 0) {
    TP_THROW(InvalidArgument, "train", "CheckpointCallback: every_steps ", options_.every_steps, " is negative");
  }
  if (options_.checkpoint.keep == 0) TP_THROW(InvalidArgument, "train", "CheckpointCallback: keep must be at least 1");
}

void CheckpointCallback::save() {
  CheckpointState state = capture_();
  if (!options_.write) return;
  last_saved_ = save_checkpoint(directory_, state, options_.checkpoint);
  ++saves_;
}

void CheckpointCallback::on_batch_end(const BatchLogs& logs) {
  if (options_.every_steps > 0 && logs.step > 0 && logs.step % options_.every_steps == 0) save();
}

// Saved even when the last step of the epoch was just saved: the epoch-end state (next epoch, batch 0) is
// the cleaner point to resume from, and rewriting the same step's file is atomic.
void CheckpointCallback::on_epoch_end(const EpochLogs&) {
  if (options_.at_epoch_end) save();
}

}  // namespace tp::train

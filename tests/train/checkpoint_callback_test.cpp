// SPDX-License-Identifier: Apache-2.0
// CheckpointCallback (saves every N steps and at epoch ends through save_checkpoint) and CallbackList.

#include "tensorpool/train/callbacks.hpp"

#include <gtest/gtest.h>

#include <string>

#include "support/checkpoint_test_support.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::train {
namespace {

using testing::TemporaryDirectory;

// A fake training loop: `epochs` x `batches` steps with the callback's hooks in Keras order.
struct FakeRun {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t batch_in_epoch = 0;

  CheckpointState capture() const {
    CheckpointState state = testing::sample_state(step);
    state.epoch = epoch;
    state.batch_in_epoch = batch_in_epoch;
    return state;
  }

  void run(Callback& callback, std::int64_t epochs, std::int64_t batches) {
    callback.on_train_begin({.epochs = epochs, .batches_per_epoch = batches});
    History history;
    for (; epoch < epochs;) {
      callback.on_epoch_begin(epoch);
      for (std::int64_t batch = 0; batch < batches; ++batch) {
        ++step;
        batch_in_epoch = batch + 1;
        callback.on_batch_end({.epoch = epoch, .batch = batch, .batches_per_epoch = batches, .step = step});
      }
      ++epoch;  // the state to resume from: next epoch, first batch
      batch_in_epoch = 0;
      history.epochs.push_back({.epoch = epoch - 1});
      callback.on_epoch_end(history.epochs.back());
    }
    callback.on_train_end(history);
  }
};

TEST(CheckpointCallbackTest, SavesEveryNStepsAndAtEachEpochEnd) {
  TemporaryDirectory directory("ckpt_callback");
  FakeRun run;
  std::vector<std::int64_t> captured_steps;
  CheckpointCallback callback(directory.path(),
                              [&] {
                                captured_steps.push_back(run.step);
                                return run.capture();
                              },
                              {.every_steps = 4, .checkpoint = {.keep = 10}});
  run.run(callback, 2, 10);
  EXPECT_EQ(captured_steps, (std::vector<std::int64_t>{4, 8, 10, 12, 16, 20, 20}));
  EXPECT_EQ(callback.saves(), 7);
  EXPECT_EQ(callback.last_saved(), directory / "checkpoint-20.tpck");
  const CheckpointState latest = *load_latest_checkpoint(directory.path());
  EXPECT_EQ(latest.step, 20);
  EXPECT_EQ(latest.epoch, 2);  // the epoch-end save replaced the mid-epoch one of the same step
  EXPECT_EQ(latest.batch_in_epoch, 0);
  EXPECT_EQ(load_checkpoint(directory / "checkpoint-8.tpck").batch_in_epoch, 8);
}

TEST(CheckpointCallbackTest, EpochEndsOnlyByDefaultAndRetentionApplies) {
  TemporaryDirectory directory("ckpt_callback_epochs");
  FakeRun run;
  CheckpointCallback callback(directory.path(), [&] { return run.capture(); });
  run.run(callback, 3, 5);
  EXPECT_EQ(callback.saves(), 3);
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory.path())) {
    files += entry.path().extension() == ".tpck";
  }
  EXPECT_EQ(files, 2u);
}

TEST(CheckpointCallbackTest, ResumeContinuesFromTheSavedState) {
  TemporaryDirectory directory("ckpt_callback_resume");
  FakeRun first;
  CheckpointCallback saving(directory.path(), [&] { return first.capture(); }, {.every_steps = 3});
  first.run(saving, 2, 4);

  const CheckpointState restored = *load_latest_checkpoint(directory.path());
  FakeRun resumed{.step = restored.step, .epoch = restored.epoch, .batch_in_epoch = restored.batch_in_epoch};
  EXPECT_EQ(resumed.step, 8);
  EXPECT_EQ(resumed.epoch, 2);
  CheckpointCallback continuing(directory.path(), [&] { return resumed.capture(); }, {.every_steps = 3});
  resumed.run(continuing, 3, 4);
  EXPECT_EQ(load_latest_checkpoint(directory.path())->step, 12);
}

TEST(CheckpointCallbackTest, SaveErrorsPropagate) {
  TemporaryDirectory directory("ckpt_callback_error");
  testing::write_bytes(directory / "file", {'x'});
  FakeRun run;
  CheckpointCallback callback(directory / "file", [&] { return run.capture(); });
  EXPECT_THROW(run.run(callback, 1, 1), DeviceError);
}

TEST(CheckpointCallbackTest, RejectsBadArguments) {
  EXPECT_THROW(CheckpointCallback("dir", nullptr), InvalidArgument);
  EXPECT_THROW(CheckpointCallback("dir", [] { return CheckpointState{}; }, {.every_steps = -1}), InvalidArgument);
  EXPECT_THROW(CheckpointCallback("dir", [] { return CheckpointState{}; }, {.checkpoint = {.keep = 0}}),
               InvalidArgument);
}

// Records every hook as a word, to check order and forwarding.
class Recorder final : public Callback {
 public:
  explicit Recorder(std::string& log) : log_(log) {}
  void on_train_begin(const TrainInfo& info) override { log_ += "train(" + std::to_string(info.epochs) + ") "; }
  void on_epoch_begin(std::int64_t epoch) override { log_ += "epoch" + std::to_string(epoch) + " "; }
  void on_batch_end(const BatchLogs& logs) override { log_ += "b" + std::to_string(logs.batch) + " "; }
  void on_epoch_end(const EpochLogs& logs) override { log_ += "end" + std::to_string(logs.epoch) + " "; }
  void on_train_end(const History& history) override { log_ += "done" + std::to_string(history.epochs.size()); }

 private:
  std::string& log_;
};

TEST(CallbackListTest, ForwardsEveryHookInOrder) {
  std::string first_log;
  std::string second_log;
  CallbackList callbacks({std::make_shared<Recorder>(first_log)});
  callbacks.add(std::make_shared<Recorder>(second_log));
  callbacks.add(std::make_shared<Callback>());  // the base class does nothing
  EXPECT_EQ(callbacks.size(), 3u);
  FakeRun run;
  run.run(callbacks, 2, 2);
  EXPECT_EQ(first_log, "train(2) epoch0 b0 b1 end0 epoch1 b0 b1 end1 done2");
  EXPECT_EQ(second_log, first_log);
  EXPECT_THROW(callbacks.add(nullptr), InvalidArgument);
}

}  // namespace
}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
// ProgressBar output on a terminal (per-step bar rewritten with '\r', throttled, closed by the epoch line)
// and elsewhere (one line per epoch).

#include "tensorpool/train/progress_bar.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "tensorpool/core/error.hpp"

namespace tp::train {
namespace {

BatchLogs batch_logs(std::int64_t batch, std::int64_t total, double elapsed) {
  BatchLogs logs;
  logs.epoch = 0;
  logs.batch = batch;
  logs.batches_per_epoch = total;
  logs.step = batch + 1;
  logs.loss = 0.4821;
  logs.accuracy = 0.8312;
  logs.samples = (batch + 1) * 32;
  logs.elapsed_seconds = elapsed;
  return logs;
}

EpochLogs epoch_logs(std::int64_t epoch, bool validation) {
  EpochLogs logs;
  logs.epoch = epoch;
  logs.loss = 0.4821;
  logs.accuracy = 0.8312;
  if (validation) {
    logs.val_loss = 0.3911;
    logs.val_accuracy = 0.8601;
  }
  logs.seconds = 9.2;
  logs.samples_per_second = 6520.4;
  return logs;
}

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t found = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++found;
  return found;
}

// Runs one epoch of `total` batches, `seconds_per_batch` apart.
std::string run_epoch(bool terminal, std::int64_t total, double seconds_per_batch, ProgressBarOptions options = {}) {
  std::ostringstream out;
  ProgressBar bar(out, terminal, options);
  bar.on_train_begin({.epochs = 5, .batches_per_epoch = total});
  bar.on_epoch_begin(0);
  for (std::int64_t batch = 0; batch < total; ++batch) {
    bar.on_batch_end(batch_logs(batch, total, static_cast<double>(batch + 1) * seconds_per_batch));
  }
  bar.on_epoch_end(epoch_logs(0, true));
  return out.str();
}

TEST(ProgressBarTest, TerminalShowsAStepBarRewrittenInPlaceThenTheEpochLine) {
  const std::string out = run_epoch(true, 1875, 0.0049);
  EXPECT_EQ(out.rfind("Epoch 1/5\n", 0), 0u) << out;
  EXPECT_NE(out.find("\r   1/1875 [" + std::string(30, '.') + "] - ETA: 9s - loss: 0.4821 - accuracy: 0.8312"),
            std::string::npos);
  const std::string last = out.substr(out.rfind('\r'));
  EXPECT_EQ(last, "\r1875/1875 [" + std::string(30, '=') +
                      "] - 9s 5ms/step - loss: 0.4821 - accuracy: 0.8312 - val_loss: 0.3911 - val_accuracy: 0.8601\n");
  EXPECT_EQ(count(out, "\n"), 2u);  // the epoch header and the finished line: the bar itself stays on one line
}

TEST(ProgressBarTest, BarAndEtaMidEpoch) {
  const std::string out = run_epoch(true, 1875, 0.0049, {.min_update_seconds = 0.0});
  // 1200/1875 of 30 cells: 19 done, the last of them the arrow head; 675 steps of 4.9 ms left.
  EXPECT_NE(out.find("\r1200/1875 [" + std::string(18, '=') + ">" + std::string(11, '.') +
                     "] - ETA: 3s - loss: 0.4821 - accuracy: 0.8312"),
            std::string::npos);
  EXPECT_NE(out.find("\r1875/1875 [" + std::string(30, '=') + "] - ETA: 0s"), std::string::npos);
}

TEST(ProgressBarTest, TerminalRedrawsAtMostTwentyTimesASecond) {
  // 1875 batches in 9.2 s: about 184 redraws at 20/s (not 1875), plus the first and the last.
  const std::size_t redraws = count(run_epoch(true, 1875, 0.0049), "\r") - 1;  // minus the epoch line
  EXPECT_GE(redraws, 150u);
  EXPECT_LE(redraws, 200u);
  // Slow batches are each drawn.
  EXPECT_EQ(count(run_epoch(true, 10, 1.0), "\r") - 1, 10u);
}

TEST(ProgressBarTest, AShorterLineBlanksWhatTheLongerOneLeft) {
  std::ostringstream out;
  ProgressBar bar(out, true, {.min_update_seconds = 0.0});
  bar.on_train_begin({.epochs = 1, .batches_per_epoch = 3});
  bar.on_epoch_begin(0);
  bar.on_batch_end(batch_logs(0, 3, 1.0));
  const std::size_t first_length = out.str().size() - out.str().rfind('\r');
  BatchLogs logs = batch_logs(1, 3, 2.0);
  logs.accuracy.reset();  // a much shorter line
  bar.on_batch_end(logs);
  const std::string second = out.str().substr(out.str().rfind('\r'));
  EXPECT_EQ(second.size(), first_length);
  EXPECT_EQ(second.back(), ' ');
  EXPECT_EQ(second.find("accuracy"), std::string::npos);
}

TEST(ProgressBarTest, TinyValuesAreShownInScientificNotation) {
  std::ostringstream out;
  ProgressBar bar(out, false);
  EpochLogs logs = epoch_logs(0, false);
  logs.loss = 1e-5;
  bar.on_epoch_end(logs);
  EXPECT_NE(out.str().find("loss: 1.0000e-05"), std::string::npos) << out.str();
}

TEST(ProgressBarTest, NotATerminalWritesOneLinePerEpochOnly) {
  std::ostringstream out;
  ProgressBar bar(out, false);
  bar.on_train_begin({.epochs = 2, .batches_per_epoch = 1875});
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    bar.on_epoch_begin(epoch);
    for (std::int64_t batch = 0; batch < 1875; ++batch)
      bar.on_batch_end(batch_logs(batch, 1875, 0.005 * static_cast<double>(batch)));
    bar.on_epoch_end(epoch_logs(epoch, epoch == 1));
  }
  EXPECT_EQ(out.str(),
            "Epoch 1/2: 1875 steps - 9s - loss: 0.4821 - accuracy: 0.8312 - 6520 samples/s\n"
            "Epoch 2/2: 1875 steps - 9s - loss: 0.4821 - accuracy: 0.8312 - val_loss: 0.3911 - val_accuracy: 0.8601"
            " - 6520 samples/s\n");
}

TEST(ProgressBarTest, UnknownTotalsAndNoAccuracy) {
  std::ostringstream out;
  ProgressBar bar(out, true, {.min_update_seconds = 0.0});
  bar.on_epoch_begin(2);
  BatchLogs logs = batch_logs(11, 0, 0.6);
  logs.accuracy.reset();
  bar.on_batch_end(logs);
  EpochLogs end = epoch_logs(2, false);
  end.accuracy.reset();
  bar.on_epoch_end(end);
  EXPECT_EQ(out.str().rfind("Epoch 3\n", 0), 0u) << out.str();
  EXPECT_NE(out.str().find("\r12/Unknown - 1s 600ms/step - loss: 0.4821"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("accuracy"), std::string::npos) << out.str();
}

TEST(ProgressBarTest, EtaFormats) {
  std::ostringstream out;
  ProgressBar bar(out, true);
  bar.on_train_begin({.epochs = 1, .batches_per_epoch = 10000});
  bar.on_epoch_begin(0);
  bar.on_batch_end(batch_logs(0, 10000, 0.5));  // 9999 steps x 0.5 s left
  EXPECT_NE(out.str().find("ETA: 1:23:20"), std::string::npos) << out.str();
  bar.on_epoch_begin(0);
  bar.on_batch_end(batch_logs(9799, 10000, 0.5));  // a resumed epoch: 200 steps x 0.5 s left
  EXPECT_NE(out.str().find("ETA: 1:40"), std::string::npos) << out.str();
}

TEST(ProgressBarTest, RejectsUselessOptions) {
  std::ostringstream out;
  EXPECT_THROW(ProgressBar(out, true, {.width = 0}), InvalidArgument);
  EXPECT_THROW(ProgressBar(out, true, {.min_update_seconds = -1.0}), InvalidArgument);
}

}  // namespace
}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
#pragma once
// ProgressBar: Keras-style training output.
//
// On a terminal: "Epoch 1/5", then one line per epoch rewritten in place with '\r' as batches end,
//   1200/1875 [=================>............] - ETA: 3s - loss: 0.4821 - accuracy: 0.8312
// redrawn at most once per min_update_seconds (and always for the first and the last batch), then replaced
// at the epoch end by the final line with the epoch's time and validation metrics, and a newline:
//   1875/1875 [==============================] - 9s 5ms/step - loss: 0.4821 - accuracy: 0.8312 - val_loss: ...
// Elsewhere (a log file, a pipe): one line per epoch and nothing per batch,
//   Epoch 1/5: 1875 steps - 9s - loss: 0.4821 - accuracy: 0.8312 - val_loss: ... - 6520 samples/s
//
// Throttling uses BatchLogs::elapsed_seconds, not a clock of its own, so output is a function of the logs.
// The stream is flushed after every write.

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "tensorpool/train/callbacks.hpp"

namespace tp::train {

struct ProgressBarOptions {
  std::size_t width = 30;            // characters between the brackets
  double min_update_seconds = 0.05;  // at most ~20 redraws per second
};

class ProgressBar final : public Callback {
 public:
  // `out` must outlive the progress bar. Pass stdout_is_terminal() for std::cout.
  ProgressBar(std::ostream& out, bool is_terminal, ProgressBarOptions options = {});

  void on_train_begin(const TrainInfo& info) override;
  void on_epoch_begin(std::int64_t epoch) override;
  void on_batch_end(const BatchLogs& logs) override;
  void on_epoch_end(const EpochLogs& logs) override;

 private:
  std::string epoch_label(std::int64_t epoch) const;  // "Epoch 2/5", or "Epoch 2" when the total is unknown
  std::string counter(std::int64_t current) const;    // "  12/1875", or "12/Unknown"
  std::string bar(std::int64_t current) const;        // "[=====>......]"
  void rewrite_line(const std::string& line, bool finish);

  std::ostream& out_;
  const bool is_terminal_;
  const ProgressBarOptions options_;
  std::int64_t epochs_ = 0;
  // Per epoch, reset by on_epoch_begin.
  std::int64_t batches_per_epoch_ = 0;  // from TrainInfo, updated by BatchLogs when they know it
  std::int64_t batches_done_ = 0;       // index + 1 of the last batch that ended
  std::int64_t steps_seen_ = 0;         // batches ended this epoch (fewer than batches_done_ after a resume)
  double last_draw_seconds_ = -1.0;     // elapsed_seconds of the last redraw; < 0: none yet this epoch
  std::size_t line_length_ = 0;         // length of the line now on screen, to blank what a shorter one leaves
};

// Whether standard output is a terminal (isatty).
bool stdout_is_terminal();

}  // namespace tp::train

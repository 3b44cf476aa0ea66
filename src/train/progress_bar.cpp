// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/progress_bar.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>

#include <fmt/format.h>

#include "tensorpool/core/error.hpp"

namespace tp::train {
namespace {

// Keras's number format: 4 decimals, scientific for magnitudes at or below 1e-3 (a tiny loss stays visible).
std::string metric(const char* name, double value) {
  if (std::abs(value) > 1e-3) return fmt::format(" - {}: {:.4f}", name, value);
  return fmt::format(" - {}: {:.4e}", name, value);
}

std::string eta(double seconds) {
  const auto whole = static_cast<long long>(std::llround(seconds));
  if (whole > 3600) return fmt::format("{}:{:02}:{:02}", whole / 3600, (whole % 3600) / 60, whole % 60);
  if (whole > 60) return fmt::format("{}:{:02}", whole / 60, whole % 60);
  return fmt::format("{}s", whole);
}

std::string per_step(double seconds) {
  if (seconds >= 1.0) return fmt::format("{:.0f}s/step", seconds);
  if (seconds >= 1e-3) return fmt::format("{:.0f}ms/step", seconds * 1e3);
  return fmt::format("{:.0f}us/step", seconds * 1e6);
}

std::string epoch_metrics(const EpochLogs& logs) {
  std::string text = metric("loss", logs.loss);
  if (logs.accuracy) text += metric("accuracy", *logs.accuracy);
  if (logs.val_loss) text += metric("val_loss", *logs.val_loss);
  if (logs.val_accuracy) text += metric("val_accuracy", *logs.val_accuracy);
  return text;
}

}  // namespace

ProgressBar::ProgressBar(std::ostream& out, bool is_terminal, ProgressBarOptions options)
    : out_(out), is_terminal_(is_terminal), options_(options) {
  if (options_.width == 0) TP_THROW(InvalidArgument, "train", "ProgressBar: width must be at least 1");
  if (!(options_.min_update_seconds >= 0.0)) {
    TP_THROW(InvalidArgument, "train", "ProgressBar: min_update_seconds ", options_.min_update_seconds,
             " must be >= 0");
  }
}

std::string ProgressBar::epoch_label(std::int64_t epoch) const {
  if (epochs_ > 0) return fmt::format("Epoch {}/{}", epoch + 1, epochs_);
  return fmt::format("Epoch {}", epoch + 1);
}

std::string ProgressBar::counter(std::int64_t current) const {
  if (batches_per_epoch_ <= 0) return fmt::format("{}/Unknown", current);
  const std::size_t digits = std::to_string(batches_per_epoch_).size();
  return fmt::format("{:>{}}/{}", current, digits, batches_per_epoch_);
}

// Keras's bar: '=' for the done part whose last cell is '>' until the epoch is complete, '.' for the rest.
std::string ProgressBar::bar(std::int64_t current) const {
  const double fraction = std::clamp(static_cast<double>(current) / static_cast<double>(batches_per_epoch_), 0.0, 1.0);
  const auto filled = static_cast<std::size_t>(static_cast<double>(options_.width) * fraction);
  std::string cells = "[";
  if (filled > 0) {
    cells.append(filled - 1, '=');
    cells.push_back(current < batches_per_epoch_ ? '>' : '=');
  }
  cells.append(options_.width - filled, '.');
  cells.push_back(']');
  return cells;
}

void ProgressBar::rewrite_line(const std::string& line, bool finish) {
  out_ << '\r' << line;
  if (line.size() < line_length_) out_ << std::string(line_length_ - line.size(), ' ');
  line_length_ = finish ? 0 : line.size();
  if (finish) out_ << '\n';
  out_.flush();
}

void ProgressBar::on_train_begin(const TrainInfo& info) {
  epochs_ = info.epochs;
  batches_per_epoch_ = info.batches_per_epoch;
}

void ProgressBar::on_epoch_begin(std::int64_t epoch) {
  batches_done_ = 0;
  steps_seen_ = 0;
  last_draw_seconds_ = -1.0;
  line_length_ = 0;
  if (is_terminal_) {
    out_ << epoch_label(epoch) << '\n';
    out_.flush();
  }
}

void ProgressBar::on_batch_end(const BatchLogs& logs) {
  if (logs.batches_per_epoch > 0) batches_per_epoch_ = logs.batches_per_epoch;
  batches_done_ = logs.batch + 1;
  ++steps_seen_;
  if (!is_terminal_) return;

  const bool last = batches_per_epoch_ > 0 && batches_done_ >= batches_per_epoch_;
  const bool due = last_draw_seconds_ < 0.0 || logs.elapsed_seconds - last_draw_seconds_ >= options_.min_update_seconds;
  if (!last && !due) return;
  last_draw_seconds_ = logs.elapsed_seconds;

  std::string line = counter(batches_done_);
  const double seconds_per_step = logs.elapsed_seconds / static_cast<double>(steps_seen_);
  if (batches_per_epoch_ > 0) {
    line += " " + bar(batches_done_);
    line += " - ETA: " + eta(seconds_per_step * static_cast<double>(batches_per_epoch_ - batches_done_));
  } else {
    line += fmt::format(" - {:.0f}s {}", logs.elapsed_seconds, per_step(seconds_per_step));
  }
  line += metric("loss", logs.loss);
  if (logs.accuracy) line += metric("accuracy", *logs.accuracy);
  rewrite_line(line, false);
}

void ProgressBar::on_epoch_end(const EpochLogs& logs) {
  const std::int64_t steps = batches_done_ > 0 ? batches_done_ : batches_per_epoch_;
  if (!is_terminal_) {
    out_ << epoch_label(logs.epoch) << ": " << steps << " steps - " << fmt::format("{:.0f}s", logs.seconds)
         << epoch_metrics(logs) << fmt::format(" - {:.0f} samples/s", logs.samples_per_second) << '\n';
    out_.flush();
    return;
  }
  std::string line = counter(steps);
  if (batches_per_epoch_ > 0) line += " " + bar(steps);
  line += fmt::format(" - {:.0f}s", logs.seconds);
  if (steps_seen_ > 0) line += " " + per_step(logs.seconds / static_cast<double>(steps_seen_));
  line += epoch_metrics(logs);
  rewrite_line(line, true);
}

bool stdout_is_terminal() { return ::isatty(STDOUT_FILENO) != 0; }

}  // namespace tp::train

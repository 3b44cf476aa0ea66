// SPDX-License-Identifier: Apache-2.0
#pragma once
// History loggers: one row or object per epoch, written as each epoch ends, so a crashed run keeps what it
// did. Both take an `append` option for a resumed run.
//
// CsvLogger:  header kCsvHeader, then one row per epoch in its column order; a missing value (no validation,
//             no accuracy) is an empty field; numbers in shortest round-trip form. Flushed after each row.
// JsonHistoryLogger: {"epochs": [{"epoch": 0, "loss": ..., "accuracy": ..., "val_loss": ...,
//             "val_accuracy": ..., "seconds": ..., "samples_per_second": ...}, ...]}, keys snake_case, a
//             missing value's key left out; the whole file is replaced atomically (temporary file, fsync,
//             rename) after each epoch, so a reader never sees half of it.
// Epochs are the 0-based indices the training loop reports (as Keras's CSVLogger writes them).

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "tensorpool/train/callbacks.hpp"

namespace tp::train {

inline constexpr char kCsvHeader[] = "epoch,loss,accuracy,val_loss,val_accuracy,seconds,samples_per_second";

struct CsvLoggerOptions {
  // Keep an existing file's rows and add to them (resume); its first line must be kCsvHeader. The rows of
  // TrainInfo::initial_epoch and later are dropped at on_train_begin (the resumed run logs those epochs
  // again), so the file holds each epoch once, as a run that was never interrupted writes it. Otherwise the
  // file is truncated at on_train_begin.
  bool append = false;
};

class CsvLogger final : public Callback {
 public:
  explicit CsvLogger(std::filesystem::path path, CsvLoggerOptions options = {});

  // Opens the file. Throws tp::DeviceError naming the path when it cannot be opened, tp::DataError when
  // appending to a file that does not start with kCsvHeader.
  void on_train_begin(const TrainInfo& info) override;
  // Writes and flushes one row (opening the file first if on_train_begin was not called). Throws
  // tp::DeviceError naming the path when the write fails.
  void on_epoch_end(const EpochLogs& logs) override;
  void on_train_end(const History& history) override;  // closes the file

  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  void open();

  const std::filesystem::path path_;
  const CsvLoggerOptions options_;
  std::optional<std::int64_t> first_epoch_;  // TrainInfo::initial_epoch; unset before on_train_begin
  std::ofstream file_;                       // open between on_train_begin and on_train_end
};

struct JsonHistoryLoggerOptions {
  // Start from the epochs already in the file (if it exists). An epoch logged again replaces that entry and
  // every later one: a run resumed from an earlier checkpoint rewrites what it redoes.
  bool append = false;
};

class JsonHistoryLogger final : public Callback {
 public:
  explicit JsonHistoryLogger(std::filesystem::path path, JsonHistoryLoggerOptions options = {});

  // Resets the history (or reads the file's with `append`; tp::DataError naming the file when malformed).
  void on_train_begin(const TrainInfo& info) override;
  // Adds the epoch and rewrites the file. Throws tp::DeviceError naming the path when that fails.
  void on_epoch_end(const EpochLogs& logs) override;

  const History& history() const noexcept { return history_; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  const std::filesystem::path path_;
  const JsonHistoryLoggerOptions options_;
  History history_;  // invariant: epochs strictly increasing, as on disk after the last on_epoch_end
};

// The JSON text JsonHistoryLogger writes for `history`.
[[nodiscard]] std::string history_to_json(const History& history);

// Reads a file JsonHistoryLogger wrote. Throws tp::DataError naming the file and the problem when it is
// missing or malformed, tp::DeviceError when the OS refuses to read it.
[[nodiscard]] History read_json_history(const std::filesystem::path& path);

}  // namespace tp::train

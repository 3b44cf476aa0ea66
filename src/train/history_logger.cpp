// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/history_logger.hpp"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "durable_file.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::train {
namespace {

std::string csv_number(double value) { return fmt::format("{}", value); }

std::string csv_number(const std::optional<double>& value) { return value ? csv_number(*value) : std::string(); }

[[noreturn]] void throw_write_error(const std::filesystem::path& path, std::string_view operation) {
  const int error_number = errno;
  TP_THROW(DeviceError, "train", "CsvLogger: cannot ", operation, " '", path.string(), "'",
           error_number != 0 ? std::string(": ") + std::strerror(error_number) : std::string());
}

// Whether an existing non-empty `path` starts with the header line. False for a missing or empty file.
bool has_rows(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return false;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error || size == 0) return false;  // unreadable: open() reports it with the OS's reason
  std::ifstream existing(path);
  std::string first_line;
  std::getline(existing, first_line);
  if (!first_line.empty() && first_line.back() == '\r') first_line.pop_back();
  if (first_line != kCsvHeader) {
    TP_THROW(DataError, "train", path.string(), ": cannot append: the first line is not the CsvLogger header \"",
             kCsvHeader, "\"");
  }
  return true;
}

// The text of `path` (which has_rows() accepted) without its rows of `first_epoch` and later, which a run
// resumed at `first_epoch` logs again; nullopt when there are none to drop. A row that does not start with
// an epoch number is refused.
std::optional<std::string> without_rows_from(const std::filesystem::path& path, std::int64_t first_epoch) {
  std::ifstream existing(path);
  std::string line, kept;
  std::getline(existing, line);
  kept = std::string(kCsvHeader) + "\n";
  bool dropped = false;
  for (std::size_t number = 2; std::getline(existing, line); ++number) {
    if (line.empty() || line == "\r") continue;
    std::int64_t epoch = -1;
    const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), epoch);
    if (error != std::errc() || end == line.data() + line.size() || *end != ',') {
      TP_THROW(DataError, "train", path.string(), ":", number, ": cannot append: the row does not start with an epoch");
    }
    if (epoch < first_epoch) {
      kept += line + "\n";
    } else {
      dropped = true;
    }
  }
  if (!dropped) return std::nullopt;
  return kept;
}

}  // namespace

CsvLogger::CsvLogger(std::filesystem::path path, CsvLoggerOptions options)
    : path_(std::move(path)), options_(options) {}

void CsvLogger::open() {
  if (file_.is_open()) file_.close();
  const bool keep_rows = options_.append && has_rows(path_);
  if (keep_rows && first_epoch_) {
    if (const std::optional<std::string> kept = without_rows_from(path_, *first_epoch_)) {
      detail::write_file_durably(path_, *kept, "CsvLogger");
    }
  }
  errno = 0;
  file_.open(path_, keep_rows ? std::ios::app : std::ios::trunc);
  if (!file_.is_open()) throw_write_error(path_, "open");
  if (!keep_rows) file_ << kCsvHeader << '\n';
  file_.flush();
  if (!file_) throw_write_error(path_, "write the header to");
}

void CsvLogger::on_train_begin(const TrainInfo& info) {
  first_epoch_ = info.initial_epoch;
  open();
}

void CsvLogger::on_epoch_end(const EpochLogs& logs) {
  if (!file_.is_open()) open();
  errno = 0;
  file_ << logs.epoch << ',' << csv_number(logs.loss) << ',' << csv_number(logs.accuracy) << ','
        << csv_number(logs.val_loss) << ',' << csv_number(logs.val_accuracy) << ',' << csv_number(logs.seconds) << ','
        << csv_number(logs.samples_per_second) << '\n';
  file_.flush();
  if (!file_) throw_write_error(path_, "write a row to");
}

void CsvLogger::on_train_end(const History&) {
  if (file_.is_open()) file_.close();
}

namespace {

nlohmann::json epoch_to_json(const EpochLogs& logs) {
  nlohmann::json object = {{"epoch", logs.epoch}, {"loss", logs.loss}};
  if (logs.accuracy) object["accuracy"] = *logs.accuracy;
  if (logs.val_loss) object["val_loss"] = *logs.val_loss;
  if (logs.val_accuracy) object["val_accuracy"] = *logs.val_accuracy;
  object["seconds"] = logs.seconds;
  object["samples_per_second"] = logs.samples_per_second;
  return object;
}

// A number, or NaN for null (nlohmann writes a non-finite double as null).
double number_at(const nlohmann::json& object, const char* key, const std::string& label) {
  const nlohmann::json& value = object.at(key);
  if (value.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!value.is_number()) TP_THROW(DataError, "train", label, ": \"", key, "\" is not a number");
  return value.get<double>();
}

std::optional<double> optional_at(const nlohmann::json& object, const char* key, const std::string& label) {
  if (!object.contains(key)) return std::nullopt;
  return number_at(object, key, label);
}

}  // namespace

std::string history_to_json(const History& history) {
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochLogs& logs : history.epochs) epochs.push_back(epoch_to_json(logs));
  return nlohmann::json{{"epochs", std::move(epochs)}}.dump(2) + "\n";
}

History read_json_history(const std::filesystem::path& path) {
  const std::vector<std::uint8_t> bytes = detail::read_whole_file(path, "history");
  const std::string label = path.string();
  History history;
  try {
    const nlohmann::json json = nlohmann::json::parse(bytes.begin(), bytes.end());
    for (const nlohmann::json& object : json.at("epochs")) {
      EpochLogs logs;
      if (!object.at("epoch").is_number_integer()) TP_THROW(DataError, "train", label, ": \"epoch\" is not an integer");
      logs.epoch = object.at("epoch").get<std::int64_t>();
      logs.loss = number_at(object, "loss", label);
      logs.accuracy = optional_at(object, "accuracy", label);
      logs.val_loss = optional_at(object, "val_loss", label);
      logs.val_accuracy = optional_at(object, "val_accuracy", label);
      logs.seconds = number_at(object, "seconds", label);
      logs.samples_per_second = number_at(object, "samples_per_second", label);
      history.epochs.push_back(logs);
    }
  } catch (const nlohmann::json::exception& error) {
    TP_THROW(DataError, "train", label, ": not a history file: ", error.what());
  }
  return history;
}

JsonHistoryLogger::JsonHistoryLogger(std::filesystem::path path, JsonHistoryLoggerOptions options)
    : path_(std::move(path)), options_(options) {}

void JsonHistoryLogger::on_train_begin(const TrainInfo&) {
  history_ = {};
  std::error_code error;
  if (options_.append && std::filesystem::exists(path_, error)) history_ = read_json_history(path_);
}

void JsonHistoryLogger::on_epoch_end(const EpochLogs& logs) {
  std::erase_if(history_.epochs, [&logs](const EpochLogs& kept) { return kept.epoch >= logs.epoch; });
  history_.epochs.push_back(logs);
  detail::write_file_durably(path_, history_to_json(history_), "JsonHistoryLogger");
}

}  // namespace tp::train

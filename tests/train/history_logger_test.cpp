// SPDX-License-Identifier: Apache-2.0
// CsvLogger and JsonHistoryLogger: content parsed back, flushed/replaced after every epoch, append for
// resumed runs, and errors naming the path.

#include "tensorpool/train/history_logger.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>

#include "support/checkpoint_test_support.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::train {
namespace {

using testing::read_text;
using testing::TemporaryDirectory;

EpochLogs epoch(std::int64_t index, bool validation) {
  EpochLogs logs;
  logs.epoch = index;
  logs.loss = 0.5 / static_cast<double>(index + 1);
  logs.accuracy = 0.8 + 0.01 * static_cast<double>(index);
  if (validation) {
    logs.val_loss = 0.1 + 1.0 / 3.0;
    logs.val_accuracy = 0.85;
  }
  logs.seconds = 9.25;
  logs.samples_per_second = 6520.5;
  return logs;
}

std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;
    std::size_t start = 0;
    for (std::size_t comma; (comma = line.find(',', start)) != std::string::npos; start = comma + 1) {
      fields.push_back(line.substr(start, comma - start));
    }
    fields.push_back(line.substr(start));
    rows.push_back(fields);
  }
  return rows;
}

TEST(CsvLoggerTest, HeaderThenOneRowPerEpochWrittenAsEachEpochEnds) {
  TemporaryDirectory directory("csv_logger");
  CsvLogger logger(directory / "history.csv");
  logger.on_train_begin({});
  logger.on_epoch_end(epoch(0, false));
  // Flushed: readable before training ends.
  auto rows = parse_csv(read_text(directory / "history.csv"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"epoch", "loss", "accuracy", "val_loss", "val_accuracy", "seconds",
                                               "samples_per_second"}));
  EXPECT_EQ(rows[1], (std::vector<std::string>{"0", "0.5", "0.8", "", "", "9.25", "6520.5"}));

  logger.on_epoch_end(epoch(1, true));
  logger.on_train_end({});
  rows = parse_csv(read_text(directory / "history.csv"));
  ASSERT_EQ(rows.size(), 3u);
  ASSERT_EQ(rows[2].size(), 7u);
  EXPECT_EQ(rows[2][0], "1");
  EXPECT_EQ(std::stod(rows[2][1]), 0.25);
  EXPECT_EQ(std::stod(rows[2][3]), 0.1 + 1.0 / 3.0);  // shortest round-trip form: exact
  EXPECT_EQ(std::stod(rows[2][4]), 0.85);
}

TEST(CsvLoggerTest, TruncatesByDefaultAppendsWhenAsked) {
  TemporaryDirectory directory("csv_logger_append");
  const auto path = directory / "history.csv";
  {
    CsvLogger first(path);
    first.on_train_begin({});
    first.on_epoch_end(epoch(0, true));
    first.on_epoch_end(epoch(1, true));
    first.on_train_end({});
  }
  {
    CsvLogger resumed(path, {.append = true});
    resumed.on_train_begin({.epochs = 3, .initial_epoch = 2});
    resumed.on_epoch_end(epoch(2, true));
    resumed.on_train_end({});
  }
  auto rows = parse_csv(read_text(path));
  ASSERT_EQ(rows.size(), 4u);  // one header
  EXPECT_EQ(rows[3][0], "2");
  {
    CsvLogger fresh(path);
    fresh.on_train_begin({});
    fresh.on_train_end({});
  }
  EXPECT_EQ(read_text(path), std::string(kCsvHeader) + "\n");
  {
    CsvLogger new_file(directory / "new.csv", {.append = true});  // append to nothing: starts with the header
    new_file.on_epoch_end(epoch(0, false));
  }
  EXPECT_EQ(parse_csv(read_text(directory / "new.csv")).size(), 2u);
}

// Issue 18: a run resumed at an epoch logs it and the later ones again; the file keeps each epoch once.
TEST(CsvLoggerTest, AppendingDropsTheRowsTheResumedRunLogsAgain) {
  TemporaryDirectory directory("csv_logger_resume");
  const auto path = directory / "history.csv";
  {
    CsvLogger first(path);
    first.on_train_begin({.epochs = 3});
    for (std::int64_t index = 0; index < 3; ++index) first.on_epoch_end(epoch(index, false));
    first.on_train_end({});
  }
  {
    CsvLogger resumed(path, {.append = true});  // from a checkpoint taken at the end of epoch 0
    resumed.on_train_begin({.epochs = 3, .initial_epoch = 1});
    resumed.on_epoch_end(epoch(1, true));
    resumed.on_epoch_end(epoch(2, true));
    resumed.on_train_end({});
  }
  auto rows = parse_csv(read_text(path));
  ASSERT_EQ(rows.size(), 4u) << read_text(path);
  EXPECT_EQ(rows[1][0], "0");
  EXPECT_EQ(rows[1][3], "");  // the first run's row, without validation
  EXPECT_EQ(rows[2][0], "1");
  EXPECT_EQ(rows[2][3], rows[3][3]);  // the resumed run's rows, with validation
  EXPECT_NE(rows[2][3], "");
  EXPECT_EQ(rows[3][0], "2");
  {
    CsvLogger finished(path, {.append = true});  // a rerun of the finished job logs nothing
    finished.on_train_begin({.epochs = 3, .initial_epoch = 3});
    finished.on_train_end({});
  }
  EXPECT_EQ(parse_csv(read_text(path)).size(), 4u);
}

TEST(CsvLoggerTest, RefusesToAppendToAForeignFile) {
  TemporaryDirectory directory("csv_logger_foreign");
  testing::write_bytes(directory / "other.csv", {'a', ',', 'b', '\n'});
  CsvLogger logger(directory / "other.csv", {.append = true});
  EXPECT_THROW(logger.on_train_begin({}), DataError);
  EXPECT_EQ(read_text(directory / "other.csv"), "a,b\n");
}

TEST(CsvLoggerTest, UnopenablePathRaisesDeviceErrorNamingIt) {
  TemporaryDirectory directory("csv_logger_error");
  CsvLogger logger(directory / "missing/dir/history.csv");
  try {
    logger.on_train_begin({});
    ADD_FAILURE() << "expected tp::DeviceError";
  } catch (const DeviceError& error) {
    EXPECT_NE(std::string(error.what()).find("missing/dir/history.csv"), std::string::npos) << error.what();
  }
}

TEST(JsonHistoryLoggerTest, WholeHistoryRewrittenAfterEveryEpoch) {
  TemporaryDirectory directory("json_logger");
  const auto path = directory / "history.json";
  JsonHistoryLogger logger(path);
  logger.on_train_begin({});
  logger.on_epoch_end(epoch(0, false));
  nlohmann::json json = nlohmann::json::parse(read_text(path));
  ASSERT_EQ(json.at("epochs").size(), 1u);
  const nlohmann::json& first = json["epochs"][0];
  EXPECT_EQ(first.at("epoch").get<int>(), 0);
  EXPECT_EQ(first.at("loss").get<double>(), 0.5);
  EXPECT_EQ(first.at("accuracy").get<double>(), 0.8);
  EXPECT_FALSE(first.contains("val_loss"));  // no validation: key left out
  EXPECT_EQ(first.at("seconds").get<double>(), 9.25);
  EXPECT_EQ(first.at("samples_per_second").get<double>(), 6520.5);

  logger.on_epoch_end(epoch(1, true));
  json = nlohmann::json::parse(read_text(path));
  ASSERT_EQ(json.at("epochs").size(), 2u);
  EXPECT_EQ(json["epochs"][1].at("val_loss").get<double>(), 0.1 + 1.0 / 3.0);
  EXPECT_EQ(json["epochs"][1].at("val_accuracy").get<double>(), 0.85);
  EXPECT_FALSE(std::filesystem::exists(directory / "history.json.tmp"));

  EXPECT_EQ(read_json_history(path), logger.history());
  EXPECT_EQ(logger.history().epochs, (std::vector<EpochLogs>{epoch(0, false), epoch(1, true)}));
}

TEST(JsonHistoryLoggerTest, AppendContinuesAResumedRunAndReplacesRedoneEpochs) {
  TemporaryDirectory directory("json_logger_append");
  const auto path = directory / "history.json";
  {
    JsonHistoryLogger first(path);
    first.on_train_begin({});
    for (std::int64_t e = 0; e < 3; ++e) first.on_epoch_end(epoch(e, true));
  }
  JsonHistoryLogger resumed(path, {.append = true});
  resumed.on_train_begin({.initial_epoch = 2});  // the checkpoint was from before epoch 2 finished
  EpochLogs redone = epoch(2, true);
  redone.loss = 0.125;
  resumed.on_epoch_end(redone);
  resumed.on_epoch_end(epoch(3, false));
  const History history = read_json_history(path);
  EXPECT_EQ(history.epochs, (std::vector<EpochLogs>{epoch(0, true), epoch(1, true), redone, epoch(3, false)}));

  JsonHistoryLogger fresh(path);
  fresh.on_train_begin({});
  fresh.on_epoch_end(epoch(0, false));
  EXPECT_EQ(read_json_history(path).epochs.size(), 1u);
}

TEST(JsonHistoryLoggerTest, NonFiniteLossSurvivesAsNaN) {
  TemporaryDirectory directory("json_logger_nan");
  JsonHistoryLogger logger(directory / "history.json");
  EpochLogs diverged = epoch(0, false);
  diverged.loss = std::nan("");
  logger.on_epoch_end(diverged);
  EXPECT_TRUE(std::isnan(read_json_history(directory / "history.json").epochs.at(0).loss));
}

TEST(JsonHistoryLoggerTest, MalformedOrMissingFilesAreDataErrorsNamingThem) {
  TemporaryDirectory directory("json_logger_bad");
  EXPECT_THROW(read_json_history(directory / "none.json"), DataError);
  testing::write_bytes(directory / "bad.json", {'{', '"', 'e'});
  try {
    (void)read_json_history(directory / "bad.json");
    ADD_FAILURE() << "expected tp::DataError";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("bad.json"), std::string::npos) << error.what();
  }
  const std::string wrong_type = R"({"epochs": [{"epoch": 0, "loss": "low", "seconds": 1, "samples_per_second": 1}]})";
  testing::write_bytes(directory / "typed.json", {wrong_type.begin(), wrong_type.end()});
  EXPECT_THROW(read_json_history(directory / "typed.json"), DataError);
  JsonHistoryLogger logger(directory / "bad.json", {.append = true});
  EXPECT_THROW(logger.on_train_begin({}), DataError);
}

TEST(JsonHistoryLoggerTest, UnwritablePathRaisesDeviceError) {
  TemporaryDirectory directory("json_logger_error");
  JsonHistoryLogger logger(directory / "missing/history.json");
  EXPECT_THROW(logger.on_epoch_end(epoch(0, false)), DeviceError);
}

}  // namespace
}  // namespace tp::train

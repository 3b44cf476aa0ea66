// SPDX-License-Identifier: Apache-2.0
// Checkpoint save/load: round trips, the `latest` pointer, retention, leftovers of crashed saves, and saves
// that fail at each step of the protocol leaving the previous checkpoint loadable.

#include "tensorpool/train/checkpoint.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "support/checkpoint_test_support.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::train {
namespace {

namespace fs = std::filesystem;
using testing::read_text;
using testing::sample_state;
using testing::TemporaryDirectory;

std::set<std::string> file_names(const fs::path& directory) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) names.insert(entry.path().filename().string());
  return names;
}

template <typename Error, typename Function>
std::string message_of(Function function) {
  try {
    function();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

TEST(CheckpointTest, RoundTripKeepsEveryDtypeShapeEmptyTensorAndMetadata) {
  TemporaryDirectory directory("ckpt_round_trip");
  const CheckpointState state = sample_state(120);
  const fs::path written = save_checkpoint(directory.path(), state);
  EXPECT_EQ(written, directory / "checkpoint-120.tpck");
  EXPECT_EQ(load_checkpoint(written), state);
  const std::optional<CheckpointState> latest = load_latest_checkpoint(directory.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, state);
  EXPECT_EQ(latest->tensors.at("empty/f32").dims, (std::vector<std::int64_t>{3, 0, 2}));
  EXPECT_TRUE(latest->tensors.at("empty/f32").bytes.empty());
  EXPECT_TRUE(latest->tensors.at("optimizer/iterations").dims.empty());
  EXPECT_EQ(latest->metadata.at("empty"), "");
}

TEST(CheckpointTest, EmptyStateAndExtremeCountersRoundTrip) {
  TemporaryDirectory directory("ckpt_empty_state");
  CheckpointState state;
  state.step = std::numeric_limits<std::int64_t>::max();
  state.epoch = -1;  // only the step must be non-negative (it names the file)
  state.batch_in_epoch = std::numeric_limits<std::int64_t>::min();
  state.rng_seed = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(load_checkpoint(save_checkpoint(directory.path(), state)), state);
}

TEST(CheckpointTest, TensorLargerThanTheWriteBufferRoundTrips) {
  TemporaryDirectory directory("ckpt_large");
  CheckpointState state = sample_state(1);
  state.tensors["big"] = testing::random_tensor(DType::f32, {3, 1024, 300}, 5);  // 3.5 MiB
  EXPECT_EQ(load_checkpoint(save_checkpoint(directory.path(), state)), state);
}

TEST(CheckpointTest, CreatesTheDirectoryAndItsParents) {
  TemporaryDirectory directory("ckpt_create");
  const fs::path nested = directory / "a/b/c";
  save_checkpoint(nested, sample_state(3));
  EXPECT_EQ(load_latest_checkpoint(nested)->step, 3);
}

TEST(CheckpointTest, LatestNamesTheNewestCheckpoint) {
  TemporaryDirectory directory("ckpt_latest");
  save_checkpoint(directory.path(), sample_state(100));
  save_checkpoint(directory.path(), sample_state(200));
  EXPECT_EQ(read_text(directory / "latest"), "checkpoint-200.tpck\n");
  EXPECT_EQ(*load_latest_checkpoint(directory.path()), sample_state(200));
}

TEST(CheckpointTest, KeepsTheTwoNewestByDefault) {
  TemporaryDirectory directory("ckpt_retention");
  for (std::int64_t step : {100, 200, 300, 400}) save_checkpoint(directory.path(), sample_state(step));
  EXPECT_EQ(file_names(directory.path()),
            (std::set<std::string>{"checkpoint-300.tpck", "checkpoint-400.tpck", "latest"}));
}

TEST(CheckpointTest, KeepIsConfigurable) {
  TemporaryDirectory directory("ckpt_keep");
  for (std::int64_t step : {1, 2, 3, 4}) save_checkpoint(directory.path(), sample_state(step), {.keep = 3});
  EXPECT_EQ(file_names(directory.path()).size(), 4u);  // three checkpoints and latest
  save_checkpoint(directory.path(), sample_state(5), {.keep = 1});
  EXPECT_EQ(file_names(directory.path()), (std::set<std::string>{"checkpoint-5.tpck", "latest"}));
  EXPECT_THROW(save_checkpoint(directory.path(), sample_state(6), {.keep = 0}), InvalidArgument);
}

TEST(CheckpointTest, SavingTheSameStepAgainReplacesIt) {
  TemporaryDirectory directory("ckpt_same_step");
  save_checkpoint(directory.path(), sample_state(100));
  CheckpointState again = sample_state(100);
  again.epoch = 1;
  again.batch_in_epoch = 0;
  save_checkpoint(directory.path(), again);
  EXPECT_EQ(*load_latest_checkpoint(directory.path()), again);
  EXPECT_EQ(file_names(directory.path()), (std::set<std::string>{"checkpoint-100.tpck", "latest"}));
}

// A run resumed from step 100 abandons 200 and 300: its first save removes them, so falling back by step
// can never pick a checkpoint from the abandoned run.
TEST(CheckpointTest, SaveAfterResumingFromAnEarlierStepRemovesTheAbandonedOnes) {
  TemporaryDirectory directory("ckpt_abandoned");
  save_checkpoint(directory.path(), sample_state(50));
  save_checkpoint(directory.path(), sample_state(100));
  save_checkpoint(directory.path(), sample_state(200));
  save_checkpoint(directory.path(), sample_state(150));
  EXPECT_EQ(file_names(directory.path()),
            (std::set<std::string>{"checkpoint-100.tpck", "checkpoint-150.tpck", "latest"}));
}

TEST(CheckpointTest, NoCheckpointGivesNullopt) {
  TemporaryDirectory directory("ckpt_none");
  EXPECT_FALSE(load_latest_checkpoint(directory / "missing").has_value());
  EXPECT_FALSE(load_latest_checkpoint(directory.path()).has_value());
  testing::write_bytes(directory / "notes.txt", {'h', 'i'});
  EXPECT_FALSE(load_latest_checkpoint(directory.path()).has_value());
}

TEST(CheckpointTest, CheckpointWithoutLatestPointerIsFound) {
  // A crash between renaming the first checkpoint into place and writing `latest`.
  TemporaryDirectory directory("ckpt_no_latest");
  save_checkpoint(directory.path(), sample_state(100));
  fs::remove(directory / "latest");
  EXPECT_EQ(load_latest_checkpoint(directory.path())->step, 100);
}

TEST(CheckpointTest, LeftoverTemporaryFilesAreIgnoredThenCleanedByTheNextSave) {
  TemporaryDirectory directory("ckpt_leftover");
  save_checkpoint(directory.path(), sample_state(100));
  // What a save killed mid-write leaves: a partial checkpoint and a partial pointer.
  const std::vector<std::uint8_t> partial = testing::read_bytes(directory / "checkpoint-100.tpck");
  testing::write_bytes(directory / "checkpoint-200.tpck.tmp", {partial.begin(), partial.begin() + 40});
  testing::write_bytes(directory / "latest.tmp", {'c', 'h', 'e'});
  testing::write_bytes(directory / "notes.tmp", {'x'});  // not ours: never touched

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(*load_latest_checkpoint(directory.path()), sample_state(100));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(fs::exists(directory / "checkpoint-200.tpck.tmp"));  // a load changes nothing

  save_checkpoint(directory.path(), sample_state(300));
  EXPECT_EQ(file_names(directory.path()),
            (std::set<std::string>{"checkpoint-100.tpck", "checkpoint-300.tpck", "latest", "notes.tmp"}));
}

TEST(CheckpointTest, InvalidStateIsRejectedBeforeAnythingIsWritten) {
  TemporaryDirectory directory("ckpt_invalid");
  const fs::path target = directory / "run";
  CheckpointState negative_step = sample_state(1);
  negative_step.step = -1;
  EXPECT_THROW(save_checkpoint(target, negative_step), InvalidArgument);
  CheckpointState short_bytes = sample_state(1);
  short_bytes.tensors["dense/bias"].bytes.pop_back();
  EXPECT_NE(message_of<InvalidArgument>([&] { save_checkpoint(target, short_bytes); }).find("dense/bias"),
            std::string::npos);
  CheckpointState negative_dim = sample_state(1);
  negative_dim.tensors["f64"].dims = {-7};
  EXPECT_THROW(save_checkpoint(target, negative_dim), InvalidArgument);
  CheckpointState unnamed = sample_state(1);
  unnamed.tensors[""] = testing::random_tensor(DType::u8, {1}, 1);
  EXPECT_THROW(save_checkpoint(target, unnamed), InvalidArgument);
  EXPECT_FALSE(fs::exists(target));
}

// --- saves that fail: each raises tp::DeviceError naming the path and leaves the previous checkpoint. ---

class FailedSaveTest : public ::testing::Test {
 protected:
  void SetUp() override { save_checkpoint(directory_.path(), sample_state(100)); }
  void expect_previous_intact() {
    EXPECT_EQ(*load_latest_checkpoint(directory_.path()), sample_state(100));
    EXPECT_EQ(read_text(directory_ / "latest"), "checkpoint-100.tpck\n");
    EXPECT_FALSE(fs::exists(directory_ / "checkpoint-200.tpck.tmp"));
  }
  TemporaryDirectory directory_{"ckpt_failed_save"};
};

TEST_F(FailedSaveTest, AFileWhereTheDirectoryShouldBe) {
  const fs::path blocked = directory_ / "checkpoint-100.tpck";  // a regular file
  const std::string message = message_of<DeviceError>([&] { save_checkpoint(blocked / "sub", sample_state(200)); });
  EXPECT_NE(message.find(blocked.string()), std::string::npos) << message;
  const std::string direct = message_of<DeviceError>([&] { save_checkpoint(blocked, sample_state(200)); });
  EXPECT_NE(direct.find("not a directory"), std::string::npos) << direct;
  expect_previous_intact();
}

TEST_F(FailedSaveTest, TheTemporaryFileCannotBeCreated) {
  fs::create_directories(directory_ / "checkpoint-200.tpck.tmp/occupied");  // a directory, not ours to remove
  const std::string message = message_of<DeviceError>([&] { save_checkpoint(directory_.path(), sample_state(200)); });
  EXPECT_NE(message.find("checkpoint-200.tpck.tmp"), std::string::npos) << message;
  EXPECT_NE(message.find("Is a directory"), std::string::npos) << message;
  EXPECT_EQ(*load_latest_checkpoint(directory_.path()), sample_state(100));
  fs::remove_all(directory_ / "checkpoint-200.tpck.tmp");
  expect_previous_intact();
}

TEST_F(FailedSaveTest, TheRenameFails) {
  fs::create_directories(directory_ / "checkpoint-200.tpck/occupied");  // rename cannot replace it
  const std::string message = message_of<DeviceError>([&] { save_checkpoint(directory_.path(), sample_state(200)); });
  EXPECT_NE(message.find("rename"), std::string::npos) << message;
  EXPECT_NE(message.find("checkpoint-200.tpck"), std::string::npos) << message;
  expect_previous_intact();  // the temporary file was removed
}

TEST_F(FailedSaveTest, ThePointerUpdateFails) {
  fs::create_directories(directory_ / "latest.tmp/occupied");
  const std::string message = message_of<DeviceError>([&] { save_checkpoint(directory_.path(), sample_state(200)); });
  EXPECT_NE(message.find("latest.tmp"), std::string::npos) << message;
  // The new file is whole but `latest` still names the old one, which retention did not touch.
  EXPECT_TRUE(fs::exists(directory_ / "checkpoint-200.tpck"));
  expect_previous_intact();
}

TEST_F(FailedSaveTest, AnUnwritableDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  ASSERT_EQ(::chmod(directory_.path().c_str(), 0555), 0);
  const std::string message = message_of<DeviceError>([&] { save_checkpoint(directory_.path(), sample_state(200)); });
  ::chmod(directory_.path().c_str(), 0755);
  EXPECT_NE(message.find("Permission denied"), std::string::npos) << message;
  expect_previous_intact();
}

}  // namespace
}  // namespace tp::train

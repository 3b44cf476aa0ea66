// SPDX-License-Identifier: Apache-2.0
// Damaged checkpoints: every kind of damage is refused with tp::DataError naming the file and the problem,
// and load_latest_checkpoint then falls back to the previous checkpoint with one line on stderr, deleting
// nothing.

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>

#include "support/checkpoint_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/train/checkpoint.hpp"
#include "train/checkpoint_format.hpp"

namespace tp::train {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::sample_state;
using testing::write_bytes;

void put_u32(std::vector<std::uint8_t>& bytes, std::size_t offset, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[offset + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(value >> (8 * i));
}

// Recomputes the CRC trailer, so damage behind it is seen by the structural checks.
void reseal(std::vector<std::uint8_t>& bytes) {
  const std::size_t body = bytes.size() - 4;
  put_u32(bytes, body, static_cast<std::uint32_t>(::crc32_z(0, bytes.data(), body)));
}

std::string refusal(const fs::path& file) {
  try {
    (void)load_checkpoint(file);
  } catch (const DataError& error) {
    return error.what();
  }
  ADD_FAILURE() << file << " was not refused with tp::DataError";
  return {};
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    save_checkpoint(directory_.path(), sample_state(100));
    save_checkpoint(directory_.path(), sample_state(200));
    good_ = read_bytes(newest());
  }
  fs::path newest() const { return directory_ / "checkpoint-200.tpck"; }
  fs::path previous() const { return directory_ / "checkpoint-100.tpck"; }

  // The damaged newest file is refused naming itself and `problem`; load_latest uses the previous one,
  // says so in one stderr line, and both files stay.
  void expect_refused_and_fallback(const std::string& problem) {
    const std::string message = refusal(newest());
    EXPECT_NE(message.find(newest().string()), std::string::npos) << message;
    EXPECT_NE(message.find(problem), std::string::npos) << message;
    expect_fallback(newest().filename().string(), problem);
    EXPECT_TRUE(fs::exists(newest()));
  }

  void expect_fallback(const std::string& refused_name, const std::string& problem) {
    ::testing::internal::CaptureStderr();
    const std::optional<CheckpointState> state = load_latest_checkpoint(directory_.path());
    const std::string log = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(state.has_value());
    EXPECT_EQ(*state, sample_state(100));
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
    EXPECT_NE(log.find("refused"), std::string::npos) << log;
    EXPECT_NE(log.find(refused_name), std::string::npos) << log;
    EXPECT_NE(log.find(problem), std::string::npos) << log;
    EXPECT_NE(log.find("using " + previous().string()), std::string::npos) << log;
    EXPECT_TRUE(fs::exists(previous()));
  }

  testing::TemporaryDirectory directory_{"ckpt_corruption"};
  std::vector<std::uint8_t> good_;
};

TEST_F(CorruptionTest, HeaderHoldsMagicVersionLengthAndTheCrcCoversTheRest) {
  ASSERT_GT(good_.size(), 64u);
  EXPECT_EQ(std::string(good_.begin(), good_.begin() + 8), "TPCKPT01");
  EXPECT_EQ(good_[8], kCheckpointVersion);
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | good_[16 + static_cast<std::size_t>(i)];
  EXPECT_EQ(length, good_.size());
  std::vector<std::uint8_t> resealed = good_;
  reseal(resealed);
  EXPECT_EQ(resealed, good_);
}

TEST_F(CorruptionTest, FlippedByteInTheMiddleFailsTheCrc) {
  std::vector<std::uint8_t> bytes = good_;
  bytes[bytes.size() / 2] ^= 0x5A;
  write_bytes(newest(), bytes);
  expect_refused_and_fallback("CRC-32 mismatch");
}

TEST_F(CorruptionTest, TruncatedFile) {
  write_bytes(newest(), {good_.begin(), good_.end() - 100});
  expect_refused_and_fallback("truncated");
}

TEST_F(CorruptionTest, FileShorterThanTheHeader) {
  write_bytes(newest(), {good_.begin(), good_.begin() + 30});
  expect_refused_and_fallback("truncated");
}

TEST_F(CorruptionTest, EmptyFile) {
  write_bytes(newest(), {});
  expect_refused_and_fallback("truncated");
}

TEST_F(CorruptionTest, TrailingBytes) {
  std::vector<std::uint8_t> bytes = good_;
  bytes.push_back(0);
  write_bytes(newest(), bytes);
  expect_refused_and_fallback("trailing bytes");
}

TEST_F(CorruptionTest, BadMagic) {
  std::vector<std::uint8_t> bytes = good_;
  bytes[0] = 'X';
  write_bytes(newest(), bytes);
  expect_refused_and_fallback("bad magic");
}

TEST_F(CorruptionTest, WrongVersionEvenWithAValidCrc) {
  std::vector<std::uint8_t> bytes = good_;
  put_u32(bytes, 8, 2);
  reseal(bytes);
  write_bytes(newest(), bytes);
  expect_refused_and_fallback("version 2 is not supported");
}

TEST_F(CorruptionTest, LatestNamesAMissingFile) {
  write_bytes(directory_ / "latest",
              {'c', 'h', 'e', 'c', 'k', 'p', 'o', 'i', 'n', 't', '-', '3', '.', 't', 'p', 'c', 'k'});
  fs::remove(newest());
  expect_fallback("checkpoint-3.tpck", "does not exist");
}

TEST_F(CorruptionTest, LatestHoldsGarbage) {
  write_bytes(directory_ / "latest", {'.', '.', '/', 'x'});
  fs::remove(newest());
  expect_fallback("latest", "corrupted checkpoint pointer");
}

TEST_F(CorruptionTest, NothingValidLeftIsAnErrorListingEveryRefusal) {
  write_bytes(newest(), {good_.begin(), good_.begin() + 70});
  write_bytes(previous(), {'n', 'o', 'p', 'e'});
  try {
    (void)load_latest_checkpoint(directory_.path());
    ADD_FAILURE() << "expected tp::DataError";
  } catch (const DataError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(newest().string()), std::string::npos) << message;
    EXPECT_NE(message.find(previous().string()), std::string::npos) << message;
  }
  EXPECT_TRUE(fs::exists(newest()));
  EXPECT_TRUE(fs::exists(previous()));
}

TEST_F(CorruptionTest, AfterAFallbackTheNextSaveRecoversTheDirectory) {
  std::vector<std::uint8_t> bytes = good_;
  bytes[bytes.size() / 3] ^= 1;
  write_bytes(newest(), bytes);
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(load_latest_checkpoint(directory_.path())->step, 100);
  ::testing::internal::GetCapturedStderr();
  save_checkpoint(directory_.path(), sample_state(150));  // the resumed run's first save drops the bad 200
  EXPECT_FALSE(fs::exists(newest()));
  EXPECT_EQ(*load_latest_checkpoint(directory_.path()), sample_state(150));
}

// In memory, no fallback: every single-byte change anywhere and every truncation is refused.
TEST_F(CorruptionTest, EverySingleByteChangeAndEveryTruncationIsRefused) {
  const std::string label = "sample.tpck";
  for (std::size_t offset = 0; offset < good_.size(); ++offset) {
    std::vector<std::uint8_t> bytes = good_;
    bytes[offset] = static_cast<std::uint8_t>(bytes[offset] + 1 + offset % 255);
    EXPECT_THROW(detail::decode_checkpoint(bytes, label), DataError) << "byte " << offset;
  }
  for (std::size_t length = 0; length < good_.size(); ++length) {
    EXPECT_THROW(detail::decode_checkpoint(std::span(good_).first(length), label), DataError) << "length " << length;
  }
}

// Damage that still carries a valid CRC (a buggy writer) is caught by the structural checks.
TEST(CheckpointStructureTest, MalformedFieldsBehindAValidCrcAreRefused) {
  CheckpointState state;
  state.tensors["w"] = testing::random_tensor(DType::f32, {2, 3}, 1);
  std::vector<std::uint8_t> good;
  detail::encode_checkpoint(
      state, [&good](const std::uint8_t* data, std::size_t size) { good.insert(good.end(), data, data + size); });
  ASSERT_EQ(good.size(), detail::encoded_size(state));
  const std::size_t dtype_offset = 64 + 4 + 1;  // fixed header, name length, "w"
  const std::size_t rank_offset = dtype_offset + 1;
  const std::size_t dim_offset = rank_offset + 4;
  const std::size_t byte_length_offset = dim_offset + 16;

  auto refused_with = [&](std::size_t offset, std::uint8_t value) {
    std::vector<std::uint8_t> bytes = good;
    bytes[offset] = value;
    reseal(bytes);
    try {
      detail::decode_checkpoint(bytes, "crafted.tpck");
    } catch (const DataError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused_with(dtype_offset, 99).find("unknown dtype code 99"), std::string::npos);
  EXPECT_NE(refused_with(rank_offset, 3).find("malformed"), std::string::npos);
  EXPECT_NE(refused_with(dim_offset + 7, 0x80).find("negative dim"), std::string::npos);
  EXPECT_NE(refused_with(byte_length_offset, 25).find("does not match its dims"), std::string::npos);
  EXPECT_NE(refused_with(60, 2).find("crafted.tpck"), std::string::npos);       // tensor_count 2: runs out
  EXPECT_NE(refused_with(60, 0).find("unexplained bytes"), std::string::npos);  // tensor_count 0: leftovers
}

}  // namespace
}  // namespace tp::train

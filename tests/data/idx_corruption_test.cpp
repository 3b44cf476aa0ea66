// SPDX-License-Identifier: Apache-2.0
// Every way an IDX file can be wrong raises tp::DataError whose message names the file and the problem:
// bad magic, bad type, bad dimension count, zero or oversized dimensions, an overflowing size, truncation
// (header and payload, raw and gzip), trailing bytes, corrupt gzip (CRC, deflate data, cut trailer, garbage
// after the stream), a missing file, a directory, and a well-formed file of the wrong kind.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/support/data_test_support.hpp"
#include "tensorpool/data/idx.hpp"

namespace tp::data {
namespace {

using testing::TempDir;

class IdxCorruptionTest : public ::testing::Test {
 protected:
  // Writes `bytes` to `name` in the temp dir and returns read_idx's DataError message.
  std::string message_for(const std::string& name, const std::vector<std::uint8_t>& bytes,
                          const IdxExpectation& expect = {}) {
    testing::write_bytes(dir_ / name, bytes);
    return testing::data_error_message([&] { (void)read_idx(dir_ / name, expect); });
  }
  // The bytes of `array` written by write_idx (raw or gzip).
  std::vector<std::uint8_t> file_of(const IdxArray& array, IdxCompression compression = IdxCompression::none) {
    write_idx(dir_ / "source", array, compression);
    return testing::read_bytes(dir_ / "source");
  }

  TempDir dir_;
};

#define EXPECT_MENTIONS(message, text) \
  EXPECT_NE((message).find(text), std::string::npos) << "expected \"" << (text) << "\" in: " << (message)

TEST_F(IdxCorruptionTest, BadMagic) {
  const std::string message = message_for("bad-magic", {0x1F, 0x00, 0x08, 0x01, 0, 0, 0, 1, 7});
  EXPECT_MENTIONS(message, "bad-magic: bad magic 0x1F000801");
  EXPECT_MENTIONS(message, "two zero bytes");
}

TEST_F(IdxCorruptionTest, BadElementType) {
  const std::string message = message_for("bad-type", {0, 0, 0x07, 0x01, 0, 0, 0, 1, 7});
  EXPECT_MENTIONS(message, "bad-type: bad element type 0x07 in magic 0x00000701");
  EXPECT_MENTIONS(message, "0x08 (u8)");
}

TEST_F(IdxCorruptionTest, BadDimensionCount) {
  EXPECT_MENTIONS(message_for("no-dims", {0, 0, 0x08, 0x00}), "no-dims: bad magic 0x00000800: 0 dimensions");
  EXPECT_MENTIONS(message_for("five-dims", {0, 0, 0x08, 0x05}), "five-dims: bad magic 0x00000805: 5 dimensions");
}

TEST_F(IdxCorruptionTest, ZeroDimension) {
  const std::string message = message_for("zero-dim", {0, 0, 0x08, 0x02, 0, 0, 0, 3, 0, 0, 0, 0});
  EXPECT_MENTIONS(message, "zero-dim: dimension 1 of 2 is zero");
}

TEST_F(IdxCorruptionTest, OversizedDimension) {
  const std::string message = message_for("huge-dim", {0, 0, 0x08, 0x01, 0x80, 0, 0, 0});
  EXPECT_MENTIONS(message, "huge-dim: dimension 0 is 2147483648");
}

TEST_F(IdxCorruptionTest, OverflowingTotalSize) {
  // 4 dims of 2^31-1 f64 elements: 2^124 x 8 bytes.
  std::vector<std::uint8_t> bytes = {0, 0, 0x0E, 0x04};
  for (int i = 0; i < 4; ++i) bytes.insert(bytes.end(), {0x7F, 0xFF, 0xFF, 0xFF});
  const std::string message = message_for("overflow", bytes);
  EXPECT_MENTIONS(message, "overflow: dimensions [2147483647,2147483647,2147483647,2147483647] of f64");
  EXPECT_MENTIONS(message, "overflows");
}

TEST_F(IdxCorruptionTest, HugeHeaderOverASmallFileIsTruncatedNotAnAllocation) {
  // 65536 x 65536 u8 (4 GiB) announced by a 15-byte file: reported as truncated, without reserving 4 GiB
  // (the payload buffer grows with the data actually present).
  const std::string message = message_for("lies", {0, 0, 0x08, 0x02, 0x00, 0x01, 0, 0, 0x00, 0x01, 0, 0, 1, 2, 3});
  EXPECT_MENTIONS(message, "lies: truncated: header says 65536 items, file holds 0 and 3 of the 65536 bytes");
}

TEST_F(IdxCorruptionTest, TruncatedMagicAndHeader) {
  EXPECT_MENTIONS(message_for("empty", {}), "empty: truncated: 0 bytes, too short for the 4-byte IDX magic");
  EXPECT_MENTIONS(message_for("short-header", {0, 0, 0x08, 0x03, 0, 0, 0, 5, 0, 0}),
                  "short-header: truncated: the magic announces 3 dimensions (12 bytes) but the file ends 6 bytes");
}

TEST_F(IdxCorruptionTest, TruncatedPayloadRaw) {
  std::vector<std::uint8_t> bytes = file_of(testing::pattern_u8({10000}));
  bytes.resize(bytes.size() - 2);
  const std::string message = message_for("t10k-labels-idx1-ubyte", bytes,
                                          {.type = {}, .ndims = {}, .file_kind = "a label file", .items = "labels"});
  EXPECT_MENTIONS(message, "t10k-labels-idx1-ubyte: truncated: header says 10000 labels, file holds 9998");
}

TEST_F(IdxCorruptionTest, TruncatedPayloadInsideAnItem) {
  std::vector<std::uint8_t> bytes = file_of(IdxArray::of<float>({3, 2}, std::vector<float>(6, 1.0f)));
  bytes.resize(bytes.size() - 5);  // 24 - 5 = 19 bytes: two whole items of 8 and 3 bytes of the third
  const std::string message = message_for("floats", bytes);
  EXPECT_MENTIONS(message, "floats: truncated: header says 3 items, file holds 2 and 3 of the 8 bytes of the next");
}

TEST_F(IdxCorruptionTest, TruncatedGzipFile) {
  // A gzip file cut in the middle: the payload is short and the stream has no trailer.
  std::vector<std::uint8_t> bytes = file_of(testing::pattern_u8({10000}), IdxCompression::gzip);
  bytes.resize(bytes.size() / 2);
  const std::string message = message_for("t10k-labels-idx1-ubyte.gz", bytes,
                                          {.type = {}, .ndims = {}, .file_kind = "a label file", .items = "labels"});
  EXPECT_MENTIONS(message, "t10k-labels-idx1-ubyte.gz: truncated: header says 10000 labels, file holds ");
  EXPECT_MENTIONS(message, "the gzip stream is cut short too");
}

TEST_F(IdxCorruptionTest, GzipTrailerCutOff) {
  // All the data inflates, but the CRC and length that would verify it are missing.
  std::vector<std::uint8_t> bytes = file_of(testing::pattern_u8({100}), IdxCompression::gzip);
  bytes.resize(bytes.size() - 8);
  EXPECT_MENTIONS(message_for("no-trailer.gz", bytes), "no-trailer.gz: truncated gzip stream");
}

TEST_F(IdxCorruptionTest, TrailingBytesRaw) {
  std::vector<std::uint8_t> bytes = file_of(testing::pattern_u8({4, 2}));
  bytes.insert(bytes.end(), {1, 2, 3});
  const std::string message = message_for("trailing", bytes);
  EXPECT_MENTIONS(message, "trailing: trailing bytes: header says 4 items [4,2] of u8");
  EXPECT_MENTIONS(message, "but 3 more bytes follow");
}

TEST_F(IdxCorruptionTest, TrailingBytesInsideGzip) {
  // Two gzip members (`cat a.gz b.gz`): the inflated content runs 8 + 5 bytes past the first header's payload.
  std::vector<std::uint8_t> bytes = file_of(testing::pattern_u8({4, 3}), IdxCompression::gzip);
  const std::vector<std::uint8_t> second = file_of(testing::pattern_u8({5}), IdxCompression::gzip);
  bytes.insert(bytes.end(), second.begin(), second.end());
  const std::string message = message_for("joined.gz", bytes);
  EXPECT_MENTIONS(message, "joined.gz: trailing bytes: header says 4 items [4,3]");
  EXPECT_MENTIONS(message, "but 13 more bytes follow");
}

TEST_F(IdxCorruptionTest, GzipGarbageAfterTheStream) {
  std::vector<std::uint8_t> bytes = file_of(testing::pattern_u8({50}), IdxCompression::gzip);
  bytes.insert(bytes.end(), {'j', 'u', 'n', 'k'});
  const std::string message = message_for("garbage.gz", bytes);
  EXPECT_MENTIONS(message, "garbage.gz: corrupt gzip stream");
  EXPECT_MENTIONS(message, "not a gzip member");
}

TEST_F(IdxCorruptionTest, GzipBadCrc) {
  std::vector<std::uint8_t> bytes = file_of(testing::pattern_u8({1000}), IdxCompression::gzip);
  bytes[bytes.size() - 8] ^= 0xFF;  // the first byte of the CRC-32 in the trailer
  const std::string message = message_for("bad-crc.gz", bytes);
  EXPECT_MENTIONS(message, "bad-crc.gz: corrupt gzip stream: incorrect data check");
  EXPECT_MENTIONS(message, "CRC-32");
}

TEST_F(IdxCorruptionTest, GzipBadLength) {
  std::vector<std::uint8_t> bytes = file_of(testing::pattern_u8({1000}), IdxCompression::gzip);
  bytes[bytes.size() - 4] ^= 0x01;  // ISIZE, the length in the trailer
  EXPECT_MENTIONS(message_for("bad-length.gz", bytes), "bad-length.gz: corrupt gzip stream: incorrect length check");
}

TEST_F(IdxCorruptionTest, GzipCorruptDeflateData) {
  std::vector<std::uint8_t> bytes = file_of(testing::pattern_u8({20000}), IdxCompression::gzip);
  // Flip bits in the middle of the compressed data: inflate either rejects the block or the CRC catches it.
  for (std::size_t i = bytes.size() / 3; i < bytes.size() / 3 + 16; ++i) bytes[i] ^= 0x5A;
  EXPECT_MENTIONS(message_for("flipped.gz", bytes), "flipped.gz: corrupt gzip stream");
}

TEST_F(IdxCorruptionTest, MissingFile) {
  const std::string message = testing::data_error_message([&] { (void)read_idx(dir_ / "absent-images.gz"); });
  EXPECT_MENTIONS(message, (dir_ / "absent-images.gz").string() + ": cannot open: No such file or directory");
}

TEST_F(IdxCorruptionTest, Directory) {
  std::filesystem::create_directory(dir_ / "folder");
  EXPECT_MENTIONS(testing::data_error_message([&] { (void)read_idx(dir_ / "folder"); }), "folder: is a directory");
}

TEST_F(IdxCorruptionTest, WrongKindOfFile) {
  const std::vector<std::uint8_t> labels = file_of(testing::pattern_u8({10}));
  const std::string message = message_for(
      "labels-as-images", labels, {.type = IdxType::u8, .ndims = 3, .file_kind = "an image file", .items = "images"});
  EXPECT_MENTIONS(message,
                  "labels-as-images: bad magic 0x00000801 for an image file: expected 0x00000803 (u8, 3 dimensions)");
  const std::vector<std::uint8_t> floats = file_of(IdxArray::of<float>({2}, std::vector<float>{1, 2}));
  EXPECT_MENTIONS(message_for("float-labels", floats,
                              {.type = IdxType::u8, .ndims = 1, .file_kind = "a label file", .items = "labels"}),
                  "float-labels: bad magic 0x00000D01 for a label file");
}

}  // namespace
}  // namespace tp::data

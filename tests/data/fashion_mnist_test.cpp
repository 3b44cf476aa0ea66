// SPDX-License-Identifier: Apache-2.0
// load_fashion_mnist on small synthetic directories (each check of images against labels, missing files and
// directories with the install command), then on the real files of the Debian package when installed.
#include "tensorpool/data/fashion_mnist.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "data/support/data_test_support.hpp"

namespace tp::data {
namespace {

using testing::TempDir;

#define EXPECT_MENTIONS(message, text) \
  EXPECT_NE((message).find(text), std::string::npos) << "expected \"" << (text) << "\" in: " << (message)

IdxArray labels_of(std::vector<std::uint8_t> values) {
  return IdxArray::of<std::uint8_t>({static_cast<std::int64_t>(values.size())}, values);
}

// A directory holding a small Fashion-MNIST: 5 training and 3 test images (gzip), labels 0..9.
class FashionMnistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write("train-images-idx3-ubyte.gz", testing::pattern_u8({5, 28, 28}));
    write("train-labels-idx1-ubyte.gz", labels_of({9, 0, 0, 3, 0}));
    write("t10k-images-idx3-ubyte.gz", testing::pattern_u8({3, 28, 28}, 1));
    write("t10k-labels-idx1-ubyte.gz", labels_of({9, 2, 1}));
  }
  void write(const std::string& name, const IdxArray& array) {
    write_idx(dir_ / name, array, name.ends_with(".gz") ? IdxCompression::gzip : IdxCompression::none);
  }

  TempDir dir_;
};

TEST_F(FashionMnistTest, LoadsASmallDirectory) {
  const FashionMnist data = load_fashion_mnist(dir_.path());
  EXPECT_EQ(data.train_images.dims, (std::vector<std::int64_t>{5, 28, 28}));
  EXPECT_EQ(data.test_images.dims, (std::vector<std::int64_t>{3, 28, 28}));
  EXPECT_EQ(data.train_images.bytes, testing::pattern_u8({5, 28, 28}).bytes);
  EXPECT_EQ(data.train_labels.values<std::uint8_t>()[0], 9);
  EXPECT_EQ(data.test_labels.values<std::uint8_t>()[2], 1);
}

TEST_F(FashionMnistTest, UncompressedFilesAreFoundToo) {
  std::filesystem::remove(dir_ / "t10k-labels-idx1-ubyte.gz");
  write("t10k-labels-idx1-ubyte", labels_of({4, 5, 6}));
  EXPECT_EQ(load_fashion_mnist(dir_.path()).test_labels.values<std::uint8_t>()[1], 5);
}

TEST_F(FashionMnistTest, LabelOutOfRange) {
  write("train-labels-idx1-ubyte.gz", labels_of({9, 0, 10, 3, 0}));
  const std::string message = testing::data_error_message([&] { load_fashion_mnist(dir_.path()); });
  EXPECT_MENTIONS(message, "train-labels-idx1-ubyte.gz: label 10 at index 2 is outside 0..9");
}

TEST_F(FashionMnistTest, CountsMismatch) {
  write("t10k-labels-idx1-ubyte.gz", labels_of({1, 2}));
  const std::string message = testing::data_error_message([&] { load_fashion_mnist(dir_.path()); });
  EXPECT_MENTIONS(message, "t10k-images-idx3-ubyte.gz holds 3 images but ");
  EXPECT_MENTIONS(message, "t10k-labels-idx1-ubyte.gz holds 2 labels");
}

TEST_F(FashionMnistTest, WrongImageSize) {
  write("t10k-images-idx3-ubyte.gz", testing::pattern_u8({3, 32, 32}));
  EXPECT_MENTIONS(testing::data_error_message([&] { load_fashion_mnist(dir_.path()); }),
                  "t10k-images-idx3-ubyte.gz: images are 32x32; Fashion-MNIST images are 28x28");
}

TEST_F(FashionMnistTest, LabelsWhereImagesBelong) {
  write("train-images-idx3-ubyte.gz", labels_of({1, 2, 3, 4, 5}));
  EXPECT_MENTIONS(testing::data_error_message([&] { load_fashion_mnist(dir_.path()); }),
                  "train-images-idx3-ubyte.gz: bad magic 0x00000801 for an image file");
}

TEST_F(FashionMnistTest, CorruptFileIsNamed) {
  std::vector<std::uint8_t> bytes = testing::read_bytes(dir_ / "train-images-idx3-ubyte.gz");
  bytes.resize(bytes.size() - 20);
  testing::write_bytes(dir_ / "train-images-idx3-ubyte.gz", bytes);
  EXPECT_MENTIONS(testing::data_error_message([&] { load_fashion_mnist(dir_.path()); }),
                  "train-images-idx3-ubyte.gz: truncated");
}

TEST_F(FashionMnistTest, MissingFileGivesTheInstallCommand) {
  std::filesystem::remove(dir_ / "t10k-images-idx3-ubyte.gz");
  const std::string message = testing::data_error_message([&] { load_fashion_mnist(dir_.path()); });
  EXPECT_MENTIONS(message, (dir_ / "t10k-images-idx3-ubyte.gz").string() + " not found");
  EXPECT_MENTIONS(message, "apt-get install dataset-fashion-mnist");
  EXPECT_MENTIONS(message, "--data DIR");
}

TEST(FashionMnistDirectoryTest, MissingDirectoryGivesTheInstallCommand) {
  const std::string message = testing::data_error_message([] { load_fashion_mnist("/nonexistent/fashion"); });
  EXPECT_MENTIONS(message, "Fashion-MNIST directory /nonexistent/fashion does not exist");
  EXPECT_MENTIONS(message, "`apt-get install dataset-fashion-mnist`");
  EXPECT_MENTIONS(message, "--data DIR");
}

TEST(FashionMnistDirectoryTest, DefaultDirectoryIsTheDebianPackages) {
  EXPECT_EQ(default_data_directory(), std::filesystem::path("/usr/share/datasets/fashion-mnist"));
}

// The real files (Debian package dataset-fashion-mnist). Only loads and checks: it must stay well under 2 s.
TEST(FashionMnistRealFilesTest, LoadsThePackagedDataset) {
  const std::filesystem::path directory = default_data_directory();
  if (!std::filesystem::exists(directory / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << directory << "; install it with `"
                 << kFashionMnistInstallCommand << "`";
  }
  const auto start = std::chrono::steady_clock::now();
  const FashionMnist data = load_fashion_mnist();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ timing   ] load_fashion_mnist: %.3f s\n", seconds);

  EXPECT_EQ(data.train_images.dims, (std::vector<std::int64_t>{60000, 28, 28}));
  EXPECT_EQ(data.train_labels.dims, (std::vector<std::int64_t>{60000}));
  EXPECT_EQ(data.test_images.dims, (std::vector<std::int64_t>{10000, 28, 28}));
  EXPECT_EQ(data.test_labels.dims, (std::vector<std::int64_t>{10000}));
  // The first example of each split is an ankle boot (label 9), as in Keras's fashion_mnist.load_data().
  EXPECT_EQ(data.train_labels.values<std::uint8_t>()[0], 9);
  EXPECT_EQ(data.test_labels.values<std::uint8_t>()[0], 9);
  // Balanced classes: 6000 per class in training, 1000 in test.
  std::vector<int> train_counts(kFashionMnistClasses), test_counts(kFashionMnistClasses);
  for (const std::uint8_t label : data.train_labels.values<std::uint8_t>()) ++train_counts[label];
  for (const std::uint8_t label : data.test_labels.values<std::uint8_t>()) ++test_counts[label];
  EXPECT_EQ(train_counts, std::vector<int>(kFashionMnistClasses, 6000));
  EXPECT_EQ(test_counts, std::vector<int>(kFashionMnistClasses, 1000));
}

}  // namespace
}  // namespace tp::data

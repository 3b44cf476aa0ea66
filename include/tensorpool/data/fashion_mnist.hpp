// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fashion-MNIST (Zalando): 70,000 28x28 grey-scale images of clothing in 10 classes, as four IDX files.
//
// The default directory is where the Debian package dataset-fashion-mnist installs them
// (/usr/share/datasets/fashion-mnist); `tensorpool train --data DIR` passes another one. Each file is looked
// up gzip-compressed first (train-images-idx3-ubyte.gz), then uncompressed (train-images-idx3-ubyte).
//
// load_fashion_mnist checks, beyond what read_idx checks of each file: images are u8 with 3 dimensions of
// N x 28 x 28, labels u8 with 1 dimension, the image and label counts of each split agree, and every label
// is in 0..9. Each problem raises tp::DataError naming the file(s). A missing directory or file raises
// tp::DataError naming it and giving the command that installs the dataset (kFashionMnistInstallCommand)
// and the --data DIR alternative.

#include <array>
#include <filesystem>
#include <string_view>

#include "tensorpool/data/idx.hpp"

namespace tp::data {

inline constexpr std::string_view kFashionMnistInstallCommand = "apt-get install dataset-fashion-mnist";
inline constexpr int kFashionMnistClasses = 10;
inline constexpr std::int64_t kFashionMnistImageSide = 28;

// Label i's name ("T-shirt/top", "Trouser", ... "Ankle boot").
inline constexpr std::array<std::string_view, kFashionMnistClasses> kFashionMnistClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

struct FashionMnist {
  IdxArray train_images{};  // u8 [60000, 28, 28]
  IdxArray train_labels{};  // u8 [60000], each in 0..9
  IdxArray test_images{};   // u8 [10000, 28, 28]
  IdxArray test_labels{};   // u8 [10000], each in 0..9
};

// "/usr/share/datasets/fashion-mnist".
std::filesystem::path default_data_directory();

// Reads and checks the four files of `directory` (see the header comment). The two image files are read
// concurrently (inflating the training images dominates the time).
FashionMnist load_fashion_mnist(const std::filesystem::path& directory = default_data_directory());

}  // namespace tp::data

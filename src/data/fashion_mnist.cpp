// SPDX-License-Identifier: Apache-2.0
// Fashion-MNIST: locating the four files, reading them, and the checks that tie images to labels.
#include "tensorpool/data/fashion_mnist.hpp"

#include <future>
#include <string>
#include <system_error>

namespace tp::data {

namespace {

std::string install_hint() {
  return std::string("Install it with `") + std::string(kFashionMnistInstallCommand) +
         "` (as root; the Debian package puts the files in " + default_data_directory().string() +
         "), or pass --data DIR naming a directory that holds train-images-idx3-ubyte.gz,"
         " train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz"
         " (gzip-compressed or not)";
}

// `stem`.gz when it exists, else `stem`; throws naming both and the install command when neither does.
std::filesystem::path locate(const std::filesystem::path& directory, const std::string& stem) {
  std::error_code error;
  std::filesystem::path compressed = directory / (stem + ".gz");
  if (std::filesystem::exists(compressed, error)) return compressed;
  std::filesystem::path plain = directory / stem;
  if (std::filesystem::exists(plain, error)) return plain;
  TP_THROW(DataError, "data", "Fashion-MNIST file ", compressed.string(), " not found (nor ", plain.string(), "). ",
           install_hint());
}

IdxArray read_images(const std::filesystem::path& path) {
  IdxArray images = read_idx(path, {.type = IdxType::u8, .ndims = 3, .file_kind = "an image file", .items = "images"});
  if (images.dims[1] != kFashionMnistImageSide || images.dims[2] != kFashionMnistImageSide) {
    TP_THROW(DataError, "data", path.string(), ": images are ", images.dims[1], "x", images.dims[2],
             "; Fashion-MNIST images are 28x28");
  }
  return images;
}

IdxArray read_labels(const std::filesystem::path& path) {
  IdxArray labels = read_idx(path, {.type = IdxType::u8, .ndims = 1, .file_kind = "a label file", .items = "labels"});
  const std::span<const std::uint8_t> values = labels.values<std::uint8_t>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] >= kFashionMnistClasses) {
      TP_THROW(DataError, "data", path.string(), ": label ", int{values[i]}, " at index ", i, " is outside 0..",
               kFashionMnistClasses - 1);
    }
  }
  return labels;
}

void check_counts(const IdxArray& images, const std::filesystem::path& images_path, const IdxArray& labels,
                  const std::filesystem::path& labels_path) {
  if (images.dims[0] != labels.dims[0]) {
    TP_THROW(DataError, "data", "counts differ: ", images_path.string(), " holds ", images.dims[0], " images but ",
             labels_path.string(), " holds ", labels.dims[0], " labels");
  }
}

}  // namespace

std::filesystem::path default_data_directory() { return "/usr/share/datasets/fashion-mnist"; }

FashionMnist load_fashion_mnist(const std::filesystem::path& directory) {
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    TP_THROW(DataError, "data", "Fashion-MNIST directory ", directory.string(),
             std::filesystem::exists(directory, error) ? " is not a directory. " : " does not exist. ", install_hint());
  }
  const std::filesystem::path train_images = locate(directory, "train-images-idx3-ubyte");
  const std::filesystem::path train_labels = locate(directory, "train-labels-idx1-ubyte");
  const std::filesystem::path test_images = locate(directory, "t10k-images-idx3-ubyte");
  const std::filesystem::path test_labels = locate(directory, "t10k-labels-idx1-ubyte");

  // The training images are ~85% of the work; read them on a second thread. get() rethrows its error.
  std::future<IdxArray> train_images_future = std::async(std::launch::async, read_images, train_images);
  FashionMnist data;
  try {
    data.test_images = read_images(test_images);
    data.train_labels = read_labels(train_labels);
    data.test_labels = read_labels(test_labels);
  } catch (...) {
    train_images_future.wait();  // the future's destructor would wait too; say it here
    throw;
  }
  data.train_images = train_images_future.get();
  check_counts(data.train_images, train_images, data.train_labels, train_labels);
  check_counts(data.test_images, test_images, data.test_labels, test_labels);
  return data;
}

}  // namespace tp::data

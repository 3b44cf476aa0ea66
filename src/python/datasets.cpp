// SPDX-License-Identifier: Apache-2.0
// The Keras datasets' files as numpy arrays (python/tensorpool/keras/datasets/ wraps them as load_data()).
// MNIST and Fashion-MNIST share the format (four IDX files of 28x28 u8 images and 0..9 labels), so both are
// read by data::load_fashion_mnist, with all its checks. Each array is the bytes read from the file, handed to
// numpy without a copy: the array owns them through a capsule.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "python/bindings.hpp"
#include "tensorpool/data/fashion_mnist.hpp"
#include "tensorpool/data/idx.hpp"

namespace tp::python {
namespace {

nb::object to_numpy(data::IdxArray&& array) {
  auto* bytes = new std::vector<std::uint8_t>(std::move(array.bytes));
  nb::capsule owner(bytes, [](void* pointer) noexcept { delete static_cast<std::vector<std::uint8_t>*>(pointer); });
  std::vector<std::size_t> dims;
  for (const std::int64_t dim : array.dims) dims.push_back(static_cast<std::size_t>(dim));
  return nb::cast(nb::ndarray<nb::numpy, std::uint8_t>(bytes->data(), dims.size(), dims.data(), owner));
}

nb::tuple load_idx_dataset(const std::string& directory) {
  data::FashionMnist loaded;
  {
    nb::gil_scoped_release release;
    loaded = data::load_fashion_mnist(directory);
  }
  nb::object train_images = to_numpy(std::move(loaded.train_images));
  nb::object train_labels = to_numpy(std::move(loaded.train_labels));
  nb::object test_images = to_numpy(std::move(loaded.test_images));
  nb::object test_labels = to_numpy(std::move(loaded.test_labels));
  return nb::make_tuple(nb::make_tuple(train_images, train_labels), nb::make_tuple(test_images, test_labels));
}

}  // namespace

void bind_datasets(nb::module_& module) {
  module.attr("fashion_mnist_directory") = data::default_data_directory().string();
  module.attr("fashion_mnist_install_command") = std::string(data::kFashionMnistInstallCommand);
  module.def("load_idx_dataset", &load_idx_dataset, nb::arg("directory"),
             "((x_train, y_train), (x_test, y_test)) as uint8 numpy arrays from the four MNIST-format IDX files "
             "(gzip-compressed or not) of `directory`; the arrays own the bytes read, no copy");
}

}  // namespace tp::python

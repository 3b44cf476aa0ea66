// SPDX-License-Identifier: Apache-2.0
// examples/fashion_mnist_data.cpp: IDX files, Fashion-MNIST and the Dataset pipeline (docs/data.md).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/data/dataset.hpp"
#include "tensorpool/data/fashion_mnist.hpp"
#include "tensorpool/data/idx.hpp"
#include "tensorpool/device/device_manager.hpp"

namespace {

// Fails the example (exit 1) when a figure the docs state is not what the code gives.
void expect(bool holds, const char* what) {
  if (!holds) {
    std::fprintf(stderr, "expected %s\n", what);
    std::exit(1);
  }
}

void idx_files() {
  const auto directory = tp::data::default_data_directory();
  tp::data::IdxArray labels = tp::data::read_idx(directory / "t10k-labels-idx1-ubyte.gz");
  expect(labels.type == tp::data::IdxType::u8, "u8 labels");
  expect(labels.dims == std::vector<std::int64_t>{10000}, "10000 labels");
  expect(labels.values<std::uint8_t>()[0] == 9, "label 9 first");  // elements are in host byte order
  tp::data::write_idx("copy.gz", labels, tp::data::IdxCompression::gzip);

  using namespace tp::data;
  const auto path = directory / "t10k-labels-idx1-ubyte.gz";
  try {
    (void)read_idx(path, {.type = IdxType::u8, .ndims = 3, .file_kind = "an image file", .items = "images"});
    // labels passed instead: "bad magic 0x00000801 for an image file: expected 0x00000803 (u8, 3 dimensions),
    //                         the file holds u8 with 1 dimension"
    expect(false, "a DataError for labels read as images");
  } catch (const tp::DataError& error) {
    expect(std::string(error.what())
                   .find("bad magic 0x00000801 for an image file: expected 0x00000803 (u8, 3 "
                         "dimensions), the file holds u8 with 1 dimension") != std::string::npos,
           "the error the docs quote");
  }
}

void pipeline() {
  tp::device::Device& cpu = tp::device::DeviceManager::instance().device("cpu:0");
  tp::data::FashionMnist data = tp::data::load_fashion_mnist();  // default directory
  tp::data::Dataset train = tp::data::Dataset::from_arrays(std::move(data.train_images), std::move(data.train_labels))
                                .shuffle(/*seed=*/42)
                                .normalize()     // x / 255 as float32
                                .batch(32)       // drop_remainder = false: the last batch holds 60000 % 32
                                .prefetch(4)     // a background thread keeps 4 batches ready
                                .stage_on(cpu);  // batches live on this host device (default: cpu:0)
  for (std::int64_t epoch = 0; epoch < 5; ++epoch) {
    tp::data::BatchIterator batches = train.epoch(epoch);
    while (std::optional<tp::data::Batch> batch = batches.next()) {
      // batch->features: float32 [size, 28, 28]; batch->labels: int32 [size]; batch->index: 0..1874
    }
  }
}

}  // namespace

int main() {
  idx_files();
  pipeline();
}

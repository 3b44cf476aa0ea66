// SPDX-License-Identifier: Apache-2.0
// _tensorpool.Dataset: tp::data::Dataset built from numpy arrays. tensorpool.data.Dataset (Python) wraps it with
// TensorFlow's names; this file only converts arrays and forwards the pipeline settings.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <optional>
#include <span>

#include "python/bindings.hpp"
#include "python/numpy_array.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/data/dataset.hpp"

namespace tp::python {
namespace {

using HostArray = nb::ndarray<nb::numpy, nb::c_contig, nb::device::cpu>;

template <typename T>
data::IdxArray idx_of(const HostArray& array, std::vector<std::int64_t> dims) {
  const std::span<const T> values(static_cast<const T*>(array.data()), array.size());
  return data::IdxArray::of<T>(std::move(dims), values);
}

// float64 values straight into a float32 IdxArray: the one conversion, without a float64 copy in between.
data::IdxArray float32_of_doubles(const HostArray& array, std::vector<std::int64_t> dims) {
  data::IdxArray result{.type = data::IdxType::f32, .dims = std::move(dims), .bytes = {}};
  result.bytes.resize(array.size() * sizeof(float));
  const auto* source = static_cast<const double*>(array.data());
  auto* target = reinterpret_cast<float*>(result.bytes.data());
  for (std::size_t i = 0; i < array.size(); ++i) target[i] = static_cast<float>(source[i]);
  result.validate();
  return result;
}

std::vector<std::int64_t> dims_of(const HostArray& array) {
  std::vector<std::int64_t> dims;
  for (std::size_t axis = 0; axis < array.ndim(); ++axis) dims.push_back(static_cast<std::int64_t>(array.shape(axis)));
  return dims;
}

// Features: uint8 kept as bytes, float32 and float64 stored as float32 (converted once); at most 4 dimensions
// (the IDX arrays' limit), the first counting examples. The Python side converts other dtypes first.
data::IdxArray feature_array(const HostArray& features) {
  if (features.ndim() < 1 || features.ndim() > 4) {
    TP_THROW(InvalidArgument, "data", "Dataset: features have ", features.ndim(),
             " dimensions; give 1 to 4 (examples first, e.g. (60000, 784))");
  }
  if (features.shape(0) == 0) TP_THROW(InvalidArgument, "data", "Dataset: features hold no examples");
  const std::vector<std::int64_t> dims = dims_of(features);
  if (features.dtype() == nb::dtype<std::uint8_t>()) return idx_of<std::uint8_t>(features, dims);
  if (features.dtype() == nb::dtype<float>()) return idx_of<float>(features, dims);
  if (features.dtype() == nb::dtype<double>()) return float32_of_doubles(features, dims);
  TP_THROW(InvalidArgument, "data", "Dataset: features must be uint8, float32 or float64");
}

data::IdxArray label_array(const HostArray& labels) {
  if (labels.ndim() != 1) {
    TP_THROW(InvalidArgument, "data", "Dataset: labels have ", labels.ndim(),
             " dimensions; give one integer class label per example");
  }
  const std::vector<std::int64_t> dims = dims_of(labels);
  if (labels.dtype() == nb::dtype<std::int32_t>()) return idx_of<std::int32_t>(labels, dims);
  if (labels.dtype() == nb::dtype<std::uint8_t>()) return idx_of<std::uint8_t>(labels, dims);
  TP_THROW(InvalidArgument, "data", "Dataset: labels must be int32 or uint8");
}

// Regression targets: float32 or float64 rows, 1 to 4 dimensions (examples first).
data::IdxArray target_array(const HostArray& targets) {
  if (targets.ndim() < 1 || targets.ndim() > 4) {
    TP_THROW(InvalidArgument, "data", "Dataset: targets have ", targets.ndim(),
             " dimensions; give 1 to 4 (examples first, e.g. (N, 1))");
  }
  const std::vector<std::int64_t> dims = dims_of(targets);
  if (targets.dtype() == nb::dtype<float>()) return idx_of<float>(targets, dims);
  if (targets.dtype() == nb::dtype<double>()) return float32_of_doubles(targets, dims);
  TP_THROW(InvalidArgument, "data", "Dataset: targets must be float32 or float64");
}

// Epoch `epoch`'s batches as (features float32, labels int32) numpy pairs, copied off the staging memory.
nb::list epoch_batches(const data::Dataset& dataset, std::int64_t epoch) {
  std::vector<data::Batch> batches;
  {
    nb::gil_scoped_release release;
    data::BatchIterator iterator = dataset.epoch(epoch);
    while (std::optional<data::Batch> batch = iterator.next()) batches.push_back(std::move(*batch));
  }
  nb::list result;
  for (const data::Batch& batch : batches) {
    nb::object labels = batch.labels.dtype() == DType::f32
                            ? to_numpy(batch.labels.to_vector<float>(), batch.labels.shape().dims_vector())
                            : to_numpy(batch.labels.to_vector<std::int32_t>(), batch.labels.shape().dims_vector());
    result.append(
        nb::make_tuple(to_numpy(batch.features.to_vector<float>(), batch.features.shape().dims_vector()), labels));
  }
  return result;
}

}  // namespace

void bind_data(nb::module_& module) {
  nb::class_<data::Dataset>(module, "Dataset",
                            "tp::data::Dataset: examples in host memory and their pipeline (shuffle, batch, prefetch)")
      .def_static(
          "from_numpy",
          [](const HostArray& features, const HostArray& labels) {
            data::IdxArray feature_values = feature_array(features);
            data::IdxArray label_values = label_array(labels);
            nb::gil_scoped_release release;
            return data::Dataset::from_arrays(std::move(feature_values), std::move(label_values));
          },
          nb::arg("features"), nb::arg("labels"))
      .def_static(
          "with_targets",
          [](const HostArray& features, const HostArray& targets) {
            data::IdxArray feature_values = feature_array(features);
            data::IdxArray target_values = target_array(targets);
            nb::gil_scoped_release release;
            return data::Dataset::with_targets(std::move(feature_values), std::move(target_values));
          },
          nb::arg("features"), nb::arg("targets"))
      .def("shuffle", &data::Dataset::shuffle, nb::arg("seed"))
      .def("batch", &data::Dataset::batch, nb::arg("size"), nb::arg("drop_remainder") = false)
      .def("prefetch", &data::Dataset::prefetch, nb::arg("depth"))
      .def_prop_ro("size", &data::Dataset::size)
      .def_prop_ro("batches_per_epoch", &data::Dataset::batches_per_epoch)
      .def_prop_ro("example_dims", &data::Dataset::example_dims)
      .def_prop_ro("batch_size", [](const data::Dataset& dataset) { return dataset.settings().batch_size; })
      .def_prop_ro("drop_remainder", [](const data::Dataset& dataset) { return dataset.settings().drop_remainder; })
      .def_prop_ro("shuffle_seed", [](const data::Dataset& dataset) { return dataset.settings().shuffle_seed; })
      .def_prop_ro("prefetch_depth", [](const data::Dataset& dataset) { return dataset.settings().prefetch_depth; })
      .def("epoch_order", &data::Dataset::epoch_order, nb::arg("epoch"))
      .def("epoch_batches", &epoch_batches, nb::arg("epoch") = 0);
}

}  // namespace tp::python

// SPDX-License-Identifier: Apache-2.0
// Dataset: construction from arrays or tensors, the pipeline settings, and the start of an epoch.
#include "tensorpool/data/dataset.hpp"

#include <limits>

#include "data/batch_assembler.hpp"
#include "data/batch_staging.hpp"
#include "data/dataset_storage.hpp"
#include "data/epoch_order.hpp"
#include "data/idx_format.hpp"
#include "data/iterator_state.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/device/device_manager.hpp"

namespace tp::data {

namespace {

using detail::dims_text;

template <typename T>
std::vector<float> to_float(const IdxArray& array) {
  const std::span<const T> values = array.values<T>();
  return std::vector<float>(values.begin(), values.end());
}

template <typename T>
std::vector<std::int32_t> to_int32(const IdxArray& array) {
  const std::span<const T> values = array.values<T>();
  return std::vector<std::int32_t>(values.begin(), values.end());
}

std::vector<float> features_as_float(const IdxArray& features) {
  switch (features.type) {
    case IdxType::i8: return to_float<std::int8_t>(features);
    case IdxType::i16: return to_float<std::int16_t>(features);
    case IdxType::i32: return to_float<std::int32_t>(features);
    case IdxType::f32: return to_float<float>(features);
    case IdxType::f64: return to_float<double>(features);
    case IdxType::u8: break;
  }
  TP_THROW(InvalidArgument, "data", "Dataset: u8 features are kept as bytes, not converted");
}

std::vector<std::int32_t> labels_as_int32(const IdxArray& labels) {
  switch (labels.type) {
    case IdxType::u8: return to_int32<std::uint8_t>(labels);
    case IdxType::i8: return to_int32<std::int8_t>(labels);
    case IdxType::i16: return to_int32<std::int16_t>(labels);
    case IdxType::i32: return to_int32<std::int32_t>(labels);
    case IdxType::f32:
    case IdxType::f64: break;
  }
  TP_THROW(InvalidArgument, "data", "Dataset: labels are ", to_string(labels.type),
           "; labels must be integers (u8, i8, i16 or i32)");
}

// The examples' features (validated), their labels or targets still to be added.
std::shared_ptr<detail::DatasetStorage> feature_storage(IdxArray& features) {
  auto storage = std::make_shared<detail::DatasetStorage>();
  storage->num_examples = features.dims[0];
  storage->example_dims.assign(features.dims.begin() + 1, features.dims.end());
  for (const std::int64_t dim : storage->example_dims) storage->example_elements *= dim;
  if (features.type == IdxType::u8) {
    storage->features_u8 = std::move(features.bytes);
  } else {
    storage->features_f32 = features_as_float(features);
  }
  return storage;
}

void check_count(const char* what, std::int64_t value, std::int64_t least) {
  if (value < least) TP_THROW(InvalidArgument, "data", "Dataset: ", what, " is ", value, "; it must be >= ", least);
}

}  // namespace

Dataset::Dataset(std::shared_ptr<const detail::DatasetStorage> storage, std::shared_ptr<detail::BatchStaging> staging)
    : storage_(std::move(storage)), staging_(std::move(staging)) {}

Dataset Dataset::from_arrays(IdxArray features, IdxArray labels) {
  features.validate();
  labels.validate();
  if (labels.dims.size() != 1) {
    TP_THROW(InvalidArgument, "data", "Dataset: labels must have 1 dimension, got ", dims_text(labels.dims));
  }
  std::vector<std::int32_t> label_values = labels_as_int32(labels);
  if (labels.dims[0] != features.dims[0]) {
    TP_THROW(InvalidArgument, "data", "Dataset: features hold ", features.dims[0], " examples ",
             dims_text(features.dims), " but labels hold ", labels.dims[0]);
  }
  std::shared_ptr<detail::DatasetStorage> storage = feature_storage(features);
  storage->labels = std::move(label_values);
  return Dataset(std::move(storage), std::make_shared<detail::BatchStaging>());
}

Dataset Dataset::with_targets(IdxArray features, IdxArray targets) {
  features.validate();
  targets.validate();
  if (targets.type != IdxType::f32 && targets.type != IdxType::f64) {
    TP_THROW(InvalidArgument, "data", "Dataset: targets are ", to_string(targets.type),
             "; regression targets must be floats (f32 or f64); use from_arrays for integer class labels");
  }
  if (targets.dims[0] != features.dims[0]) {
    TP_THROW(InvalidArgument, "data", "Dataset: features hold ", features.dims[0], " examples ",
             dims_text(features.dims), " but targets hold ", targets.dims[0]);
  }
  std::shared_ptr<detail::DatasetStorage> storage = feature_storage(features);
  storage->target_dims.assign(targets.dims.begin() + 1, targets.dims.end());
  storage->target_elements = 1;
  for (const std::int64_t dim : storage->target_dims) storage->target_elements *= dim;
  storage->targets = features_as_float(targets);
  return Dataset(std::move(storage), std::make_shared<detail::BatchStaging>());
}

Dataset Dataset::from_tensors(const Tensor& features, const Tensor& labels) {
  if (!features.defined() || !labels.defined()) TP_THROW(InvalidArgument, "data", "Dataset: an undefined tensor");
  if (features.shape().rank() == 0 || features.shape().dim(0) == 0) {
    TP_THROW(InvalidArgument, "data", "Dataset: features ", features.shape(), " hold no examples");
  }
  if (labels.shape().rank() != 1) {
    TP_THROW(InvalidArgument, "data", "Dataset: labels must have 1 dimension, got ", labels.shape());
  }
  const std::vector<std::int64_t> dims = features.shape().dims_vector();
  IdxArray feature_array;
  if (features.dtype() == DType::u8) {
    feature_array = IdxArray::of<std::uint8_t>(dims, features.to_vector<std::uint8_t>());
  } else if (features.dtype() == DType::f32) {
    feature_array = IdxArray::of<float>(dims, features.to_vector<float>());
  } else {
    TP_THROW(InvalidArgument, "data", "Dataset: features are ", features.dtype(), "; use uint8 or float32");
  }
  IdxArray label_array;
  if (labels.dtype() == DType::i32) {
    label_array = IdxArray::of<std::int32_t>(labels.shape().dims_vector(), labels.to_vector<std::int32_t>());
  } else if (labels.dtype() == DType::u8) {
    label_array = IdxArray::of<std::uint8_t>(labels.shape().dims_vector(), labels.to_vector<std::uint8_t>());
  } else {
    TP_THROW(InvalidArgument, "data", "Dataset: labels are ", labels.dtype(), "; use int32 or uint8");
  }
  return from_arrays(std::move(feature_array), std::move(label_array));
}

Dataset Dataset::shuffle(std::uint64_t seed) const {
  Dataset result = *this;
  result.settings_.shuffle_seed = seed;
  return result;
}

Dataset Dataset::batch(std::int64_t size, bool drop_remainder) const {
  check_count("the batch size", size, 1);
  Dataset result = *this;
  result.settings_.batch_size = size;
  result.settings_.drop_remainder = drop_remainder;
  return result;
}

Dataset Dataset::map(ExampleMap map) const {
  Dataset result = *this;
  result.settings_.maps.push_back(std::move(map));
  return result;
}

Dataset Dataset::shard(std::int64_t num_shards, std::int64_t index) const {
  check_count("the number of shards", num_shards, 1);
  if (index < 0 || index >= num_shards) {
    TP_THROW(InvalidArgument, "data", "Dataset: shard index ", index, " is outside 0..", num_shards - 1);
  }
  Dataset result = *this;
  result.settings_.num_shards = num_shards;
  result.settings_.shard_index = index;
  return result;
}

Dataset Dataset::prefetch(std::int64_t depth) const {
  check_count("the prefetch depth", depth, 0);
  Dataset result = *this;
  result.settings_.prefetch_depth = depth;
  return result;
}

Dataset Dataset::stage_on(device::Device& device) const {
  if (!device.host_accessible() && device.shared_memory() == nullptr) {
    TP_THROW(InvalidArgument, "data", "Dataset: batches are assembled by host code, so they cannot be staged on ",
             device.name(), " (", device.shared_memory_note(),
             "); stage them on cpu:0 and copy each batch with Tensor::to");
  }
  Dataset result = *this;
  result.settings_.staging_device = &device;
  return result;
}

std::int64_t Dataset::size() const noexcept { return storage_->num_examples; }

std::int64_t Dataset::shard_size() const noexcept {
  return detail::shard_size(storage_->num_examples, settings_.num_shards, settings_.shard_index);
}

namespace {

std::int64_t batches_of(std::int64_t examples, std::int64_t batch_size, bool drop_remainder) {
  return drop_remainder ? examples / batch_size : (examples + batch_size - 1) / batch_size;
}

}  // namespace

std::int64_t Dataset::batches_per_epoch() const noexcept {
  return batches_of(shard_size(), settings_.batch_size, settings_.drop_remainder);
}

std::int64_t Dataset::common_batches_per_epoch() const noexcept {
  // The last shard is the smallest (shard i holds ceil((N - i) / S) examples).
  const std::int64_t smallest =
      detail::shard_size(storage_->num_examples, settings_.num_shards, settings_.num_shards - 1);
  return batches_of(smallest, settings_.batch_size, settings_.drop_remainder);
}

const std::vector<std::int64_t>& Dataset::example_dims() const noexcept { return storage_->example_dims; }

std::vector<std::int64_t> Dataset::epoch_order(std::int64_t epoch) const {
  check_count("the epoch", epoch, 0);
  return detail::shard_order(storage_->num_examples, settings_.shuffle_seed, epoch, settings_.num_shards,
                             settings_.shard_index);
}

BatchIterator Dataset::epoch(std::int64_t epoch, std::int64_t start_batch) const {
  check_count("the epoch", epoch, 0);
  const std::int64_t batches = batches_per_epoch();
  if (start_batch < 0 || start_batch > batches) {
    TP_THROW(InvalidArgument, "data", "Dataset: start batch ", start_batch, " is outside 0..", batches,
             " (this shard has ", batches, " batches per epoch)");
  }
  device::Device& device = settings_.staging_device != nullptr
                               ? *settings_.staging_device
                               : device::DeviceManager::instance().device(device::DeviceId{});
  detail::BatchAssembler assembler(storage_, settings_.maps, settings_.batch_size, settings_.drop_remainder,
                                   epoch_order(epoch), staging_, device);
  return BatchIterator(std::make_unique<detail::IteratorState>(std::move(assembler), epoch, start_batch,
                                                               static_cast<std::size_t>(settings_.prefetch_depth)));
}

bool Dataset::pinned_staging() const noexcept { return staging_->pinned(); }

memory::MemoryStats Dataset::staging_stats() const { return staging_->stats(); }

}  // namespace tp::data

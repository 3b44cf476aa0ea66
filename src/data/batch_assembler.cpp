// SPDX-License-Identifier: Apache-2.0
#include "data/batch_assembler.hpp"

#include <algorithm>
#include <cstring>

#include "tensorpool/core/convert.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/allocation_tag.hpp"

namespace tp::data::detail {

BatchAssembler::BatchAssembler(std::shared_ptr<const DatasetStorage> storage, std::vector<ExampleMap> maps,
                               std::int64_t batch_size, bool drop_remainder, std::vector<std::int64_t> order,
                               std::shared_ptr<BatchStaging> staging, device::Device& device)
    : storage_(std::move(storage)),
      maps_(std::move(maps)),
      batch_size_(batch_size),
      order_(std::move(order)),
      num_batches_(drop_remainder ? static_cast<std::int64_t>(order_.size()) / batch_size_
                                  : (static_cast<std::int64_t>(order_.size()) + batch_size_ - 1) / batch_size_),
      staging_(std::move(staging)),
      device_(&device) {
  if (!storage_->features_u8.empty() && !maps_.empty() && maps_.front().divisor()) {
    first_map_fused_ = true;
    u8_divisor_ = *maps_.front().divisor();
  }
}

void BatchAssembler::fill_features(std::int64_t example, float* out) const {
  const auto elements = static_cast<std::size_t>(storage_->example_elements);
  const std::size_t offset = static_cast<std::size_t>(example) * elements;
  if (!storage_->features_u8.empty()) {
    u8_to_f32_divided(storage_->features_u8.data() + offset, u8_divisor_, out, static_cast<std::int64_t>(elements));
  } else {
    std::memcpy(out, storage_->features_f32.data() + offset, elements * sizeof(float));
  }
  const std::span<float> features(out, elements);
  for (std::size_t m = first_map_fused_ ? 1 : 0; m < maps_.size(); ++m) maps_[m].apply(features);
}

void BatchAssembler::prefetch_features(std::int64_t example) const {
  const auto elements = static_cast<std::size_t>(storage_->example_elements);
  const std::size_t offset = static_cast<std::size_t>(example) * elements;
  const char* begin = storage_->features_u8.empty()
                          ? reinterpret_cast<const char*>(storage_->features_f32.data() + offset)
                          : reinterpret_cast<const char*>(storage_->features_u8.data() + offset);
  const std::size_t bytes = elements * (storage_->features_u8.empty() ? sizeof(float) : 1);
  for (std::size_t line = 0; line < bytes; line += 64) __builtin_prefetch(begin + line);
}

Batch BatchAssembler::assemble(std::int64_t index) const {
  const std::int64_t begin = index * batch_size_;
  const std::int64_t size = std::min(batch_size_, static_cast<std::int64_t>(order_.size()) - begin);
  std::vector<std::int64_t> dims{size};
  dims.insert(dims.end(), storage_->example_dims.begin(), storage_->example_dims.end());
  const Shape feature_shape(dims);
  // Class labels int32 [size], or regression targets float32 [size, target dims...].
  const bool targets = !storage_->targets.empty();
  const DType label_dtype = targets ? DType::f32 : DType::i32;
  std::vector<std::int64_t> label_dims{size};
  if (targets) label_dims.insert(label_dims.end(), storage_->target_dims.begin(), storage_->target_dims.end());
  const Shape label_shape(label_dims);

  const std::size_t feature_bytes = byte_size(feature_shape, DType::f32);
  const std::size_t label_bytes = byte_size(label_shape, label_dtype);
  std::shared_ptr<Buffer> features = staging_->allocate(*device_, feature_bytes,
                                                        memory::AllocationTag{.name = "batch/x",
                                                                              .op = {},
                                                                              .shape = dims,
                                                                              .dtype = std::string(name_of(DType::f32)),
                                                                              .kind = memory::AllocationKind::staging,
                                                                              .step = -1});
  std::shared_ptr<Buffer> labels = staging_->allocate(*device_, label_bytes,
                                                      memory::AllocationTag{.name = "batch/y",
                                                                            .op = {},
                                                                            .shape = label_dims,
                                                                            .dtype = std::string(name_of(label_dtype)),
                                                                            .kind = memory::AllocationKind::staging,
                                                                            .step = -1});

  auto* x = static_cast<float*>(features->data());
  const std::int64_t elements = storage_->example_elements;
  const auto target_elements = static_cast<std::size_t>(storage_->target_elements);
  for (std::int64_t k = 0; k < size; ++k) {
    const std::int64_t example = order_[static_cast<std::size_t>(begin + k)];
    if (k + 1 < size) prefetch_features(order_[static_cast<std::size_t>(begin + k + 1)]);
    fill_features(example, x + k * elements);
    if (targets) {
      std::memcpy(static_cast<float*>(labels->data()) + static_cast<std::size_t>(k) * target_elements,
                  storage_->targets.data() + static_cast<std::size_t>(example) * target_elements,
                  target_elements * sizeof(float));
    } else {
      static_cast<std::int32_t*>(labels->data())[k] = storage_->labels[static_cast<std::size_t>(example)];
    }
  }
  return Batch{.features = Tensor::from_buffer(std::move(features), 0, feature_shape, DType::f32),
               .labels = Tensor::from_buffer(std::move(labels), 0, label_shape, label_dtype),
               .size = size,
               .index = index};
}

}  // namespace tp::data::detail

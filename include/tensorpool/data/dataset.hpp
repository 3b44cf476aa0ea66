// SPDX-License-Identifier: Apache-2.0
#pragma once
// Dataset: N in-memory examples (features and an int32 label each) and the pipeline that turns them into
// batches: shard -> shuffle -> map -> batch -> prefetch.
//
// Each stage is a setting, not a step in a chain: the stages always run in the order above, whatever the
// order of the calls, and setting a stage again replaces it (maps are the exception: each map() call adds
// one, run in call order). Every call returns a new Dataset that shares the examples (copies are cheap).
//
// Epoch order. Epoch e visits the examples in a permutation that is a pure function of (seed, e): the same
// on every run and every machine, different between epochs (Fisher-Yates driven by splitmix64). Without
// shuffle() the order is 0..N-1. An epoch can be resumed from any batch: epoch(e, k) yields exactly the
// batches k.. of epoch(e, 0).
//
// Sharding (strided): shard i of S takes positions i, i + S, i + 2S, ... of the epoch's order. Every example
// belongs to exactly one shard in every epoch; shard sizes differ by at most one (shard i holds
// ceil((N - i) / S) examples); with shuffle() all shards must use the same seed. A shard's batch count is
// known up front (batches_per_epoch()); common_batches_per_epoch() is the smallest shard's count, the number
// of steps synchronous workers can all run.
//
// Features. u8 features are kept as bytes; other types are converted to float32 once, at construction.
// Batches always hold float32 features: the source values, then each map (normalize() gives x / 255).
//
// Batches and staging memory. A batch's tensors are allocated on the staging device (stage_on(); cpu:0 of
// DeviceManager::instance() by default) through the dataset's staging stack: a memory stack (BFC, growth
// policy grow) over page-locked memory (memory::PinnedHostResource), so copies to accelerators start from
// pinned pages. When the OS refuses to lock pages, the stack is replaced by one over pageable memory, with one
// line on stderr; pinned_staging() then reports false. The stack is shared by every copy of the dataset and
// by every batch (a batch holds it until freed).
// Staged on an accelerator with shared memory (Device::shared_memory(): an opencl device with fine-grained
// SVM), batches are assembled straight into that device's shared memory instead: the host writes them where
// the device's kernels read them, so feeding one costs no host-staged copy (a copy on the device's queue).

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/data/batch.hpp"
#include "tensorpool/data/example_map.hpp"
#include "tensorpool/data/idx.hpp"
#include "tensorpool/memory/memory_stats.hpp"

namespace tp::device {
class Device;
}

namespace tp::data {

namespace detail {
struct DatasetStorage;
class BatchStaging;
}  // namespace detail

// The pipeline settings (see the header comment); Dataset's calls fill them.
struct PipelineSettings {
  std::optional<std::uint64_t> shuffle_seed{};  // unset: no shuffle
  std::int64_t batch_size = 1;
  bool drop_remainder = false;
  std::vector<ExampleMap> maps{};
  std::int64_t num_shards = 1;
  std::int64_t shard_index = 0;
  std::int64_t prefetch_depth = 0;           // 0: batches are assembled in next()
  device::Device* staging_device = nullptr;  // null: cpu:0 of DeviceManager::instance()
};

class Dataset {
 public:
  // features: N examples (its first dimension), u8 or any other IDX type (converted to float32); labels: 1-D
  // of N integers (u8, i8, i16, i32). Throws tp::InvalidArgument naming the problem (an invalid array, float
  // labels, counts that differ).
  [[nodiscard]] static Dataset from_arrays(IdxArray features, IdxArray labels);
  // The same from tensors: features u8 or f32 of rank >= 1, labels i32 or u8 of rank 1 (copied to the host).
  [[nodiscard]] static Dataset from_tensors(const Tensor& features, const Tensor& labels);
  // Regression: features as from_arrays; `targets` N float rows (f32 or f64, 1 to 4 dims, the first counting
  // examples), stored as float32. Batches' labels are then float32 [size, target dims...] (a mean squared
  // error model's labels) instead of int32 [size]. Throws tp::InvalidArgument naming the problem (an invalid
  // array, non-float targets, counts that differ).
  [[nodiscard]] static Dataset with_targets(IdxArray features, IdxArray targets);

  // Shuffles each epoch with `seed` (see Epoch order).
  [[nodiscard]] Dataset shuffle(std::uint64_t seed) const;
  // Batches of `size` (> 0) examples; the last one smaller unless drop_remainder drops it.
  [[nodiscard]] Dataset batch(std::int64_t size, bool drop_remainder = false) const;
  // Adds a map (see example_map.hpp); normalize() adds ExampleMap::normalize().
  [[nodiscard]] Dataset map(ExampleMap map) const;
  [[nodiscard]] Dataset normalize() const { return map(ExampleMap::normalize()); }
  // Keeps shard `index` of `num_shards` (0 <= index < num_shards); see Sharding.
  [[nodiscard]] Dataset shard(std::int64_t num_shards, std::int64_t index) const;
  // Assembles up to `depth` (>= 0) batches ahead on a background thread.
  [[nodiscard]] Dataset prefetch(std::int64_t depth) const;
  // Where batches live; throws tp::InvalidArgument unless device.host_accessible() or it has shared memory.
  [[nodiscard]] Dataset stage_on(device::Device& device) const;

  // Examples in the whole dataset (all shards).
  [[nodiscard]] std::int64_t size() const noexcept;
  // Examples of this shard in each epoch.
  [[nodiscard]] std::int64_t shard_size() const noexcept;
  [[nodiscard]] std::int64_t batches_per_epoch() const noexcept;
  // The smallest batches_per_epoch() over all num_shards shards.
  [[nodiscard]] std::int64_t common_batches_per_epoch() const noexcept;
  // The dims of one example's features ([28, 28]); a batch's features are [size, dims...].
  const std::vector<std::int64_t>& example_dims() const noexcept;
  const PipelineSettings& settings() const noexcept { return settings_; }

  // This shard's example indexes for `epoch` (>= 0), in visiting order.
  [[nodiscard]] std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;
  // Iterates epoch `epoch` (>= 0) from batch `start_batch` (0..batches_per_epoch(); the end gives an empty
  // iteration). Throws tp::InvalidArgument naming the value otherwise.
  [[nodiscard]] BatchIterator epoch(std::int64_t epoch, std::int64_t start_batch = 0) const;

  // Whether staging memory is page-locked (false after the fallback to pageable memory).
  [[nodiscard]] bool pinned_staging() const noexcept;
  [[nodiscard]] memory::MemoryStats staging_stats() const;

 private:
  Dataset(std::shared_ptr<const detail::DatasetStorage> storage, std::shared_ptr<detail::BatchStaging> staging);

  std::shared_ptr<const detail::DatasetStorage> storage_;  // never null; immutable
  std::shared_ptr<detail::BatchStaging> staging_;          // never null; shared by copies and batches
  PipelineSettings settings_;
};

}  // namespace tp::data

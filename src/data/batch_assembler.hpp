// SPDX-License-Identifier: Apache-2.0
#pragma once
// BatchAssembler: builds batch k of one epoch of one shard: allocates its two staging buffers, gathers the
// examples in the epoch's order, converts them to float32 and runs the maps. Immutable after construction,
// so assemble() may run on any thread (the prefetch thread) while the consumer holds earlier batches.

#include <cstdint>
#include <memory>
#include <vector>

#include "data/batch_staging.hpp"
#include "data/dataset_storage.hpp"
#include "tensorpool/data/batch.hpp"
#include "tensorpool/data/example_map.hpp"

namespace tp::data::detail {

class BatchAssembler {
 public:
  // `order` is the shard's example indexes for the epoch; batch_size > 0.
  BatchAssembler(std::shared_ptr<const DatasetStorage> storage, std::vector<ExampleMap> maps, std::int64_t batch_size,
                 bool drop_remainder, std::vector<std::int64_t> order, std::shared_ptr<BatchStaging> staging,
                 device::Device& device);

  // Batches in the epoch: floor or ceil of order.size() / batch_size as drop_remainder says.
  std::int64_t num_batches() const noexcept { return num_batches_; }
  // Batch `index` (0 <= index < num_batches()).
  Batch assemble(std::int64_t index) const;

 private:
  void fill_features(std::int64_t example, float* out) const;
  // Asks the cache for the next example's row while this one converts: the shuffled order jumps across the
  // dataset, so each row starts with a miss that the hardware prefetcher only catches a few lines in.
  void prefetch_features(std::int64_t example) const;

  // Set once by the constructor (not const, so the assembler moves into its iterator without copies).
  std::shared_ptr<const DatasetStorage> storage_;
  std::vector<ExampleMap> maps_;
  std::int64_t batch_size_;
  std::vector<std::int64_t> order_;
  std::int64_t num_batches_;
  std::shared_ptr<BatchStaging> staging_;
  device::Device* device_;
  // u8 sources whose first map is a division: that map is fused into the conversion (v / divisor, the same
  // float32 division the map computes), and skipped in maps_; otherwise the conversion divides by 1.
  bool first_map_fused_ = false;
  float u8_divisor_ = 1.0f;
};

}  // namespace tp::data::detail

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The examples a Dataset (and every copy of it) shares. Immutable after construction, so any number of
// iterators and prefetch threads read it without locks.
//
// Invariant: exactly one of features_u8 / features_f32 is non-empty, holding num_examples x
// example_elements values in example order; exactly one of labels (num_examples values) and targets
// (num_examples x target_elements values, Dataset::with_targets) is non-empty.

#include <cstdint>
#include <vector>

namespace tp::data::detail {

struct DatasetStorage {
  std::int64_t num_examples = 0;
  std::vector<std::int64_t> example_dims{};  // the features' dims after the first
  std::int64_t example_elements = 1;         // product of example_dims (1 for scalar examples)
  std::vector<std::uint8_t> features_u8{};   // when the source features are u8
  std::vector<float> features_f32{};         // otherwise: converted once
  std::vector<std::int32_t> labels{};
  std::vector<std::int64_t> target_dims{};  // with targets: their dims after the first
  std::int64_t target_elements = 0;         // with targets: product of target_dims (1 for scalar targets)
  std::vector<float> targets{};
};

}  // namespace tp::data::detail

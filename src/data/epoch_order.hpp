// SPDX-License-Identifier: Apache-2.0
#pragma once
// The visiting order of an epoch: a permutation that is a pure function of (seed, epoch), then the strided
// pick of one shard (dataset.hpp states the rules).

#include <cstdint>
#include <optional>
#include <vector>

namespace tp::data::detail {

// Fisher-Yates over 0..n-1 driven by splitmix64 seeded from (seed, epoch), with unbiased bounded draws:
// identical on every platform (no std:: distributions, whose algorithms are implementation-defined).
std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

// Examples in shard `index` of `num_shards` over n: ceil((n - index) / num_shards), 0 when index >= n.
std::int64_t shard_size(std::int64_t n, std::int64_t num_shards, std::int64_t index) noexcept;

// Shard `index`'s examples of epoch `epoch`, in order: positions index, index + num_shards, ... of the
// epoch's permutation (or of 0..n-1 when seed is unset).
std::vector<std::int64_t> shard_order(std::int64_t n, std::optional<std::uint64_t> seed, std::int64_t epoch,
                                      std::int64_t num_shards, std::int64_t index);

}  // namespace tp::data::detail

// SPDX-License-Identifier: Apache-2.0
#include "data/epoch_order.hpp"

#include <numeric>
#include <utility>

namespace tp::data::detail {

namespace {

// splitmix64 (Steele, Lea, Flood 2014): a 64-bit counter through a strong mixer.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next() noexcept {
    state_ += 0x9E3779B97F4A7C15ULL;
    return mix(state_);
  }
  // Uniform in [0, bound) for bound > 0, by rejection of the biased low range.
  std::uint64_t below(std::uint64_t bound) noexcept {
    const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const std::uint64_t value = next();
      if (value >= threshold) return value % bound;
    }
  }
  static std::uint64_t mix(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

}  // namespace

std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  // The epoch is mixed before it meets the seed, so (seed, e) and (seed + 1, e - 1) share no stream.
  SplitMix64 random(SplitMix64::mix(seed) ^ SplitMix64::mix(static_cast<std::uint64_t>(epoch) + 0x632BE59BD9B4E019ULL));
  for (std::size_t i = order.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(random.below(i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

std::int64_t shard_size(std::int64_t n, std::int64_t num_shards, std::int64_t index) noexcept {
  if (index >= n) return 0;
  return (n - index + num_shards - 1) / num_shards;
}

std::vector<std::int64_t> shard_order(std::int64_t n, std::optional<std::uint64_t> seed, std::int64_t epoch,
                                      std::int64_t num_shards, std::int64_t index) {
  std::vector<std::int64_t> all;
  if (seed) {
    all = epoch_permutation(n, *seed, epoch);
  } else {
    all.resize(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), std::int64_t{0});
  }
  if (num_shards == 1) return all;
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(shard_size(n, num_shards, index)));
  for (std::int64_t position = index; position < n; position += num_shards) {
    mine.push_back(all[static_cast<std::size_t>(position)]);
  }
  return mine;
}

}  // namespace tp::data::detail

// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/gemm_auto.hpp"

#include "backend/cpu/kernels/gemm_auto_cache.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace tp::backend::cpu {
namespace {

// A shape class: each of m, n and k rounded up to a power of two, and the two transposes. Sizes vary at run
// time (the last, partial batch of an epoch; inference at any batch size), while which library is faster
// changes slowly with size: classes keep the measurements to a handful per model instead of one per batch
// size met.
struct GemmShapeClass {
  int m_bits, n_bits, k_bits;
  bool transpose_a, transpose_b;
  auto operator<=>(const GemmShapeClass&) const = default;
};

int bits_to_hold(std::int64_t size) { return static_cast<int>(std::bit_width(static_cast<std::uint64_t>(size - 1))); }

GemmShapeClass shape_class_of(const GemmShape& shape) {
  return {.m_bits = bits_to_hold(shape.m),
          .n_bits = bits_to_hold(shape.n),
          .k_bits = bits_to_hold(shape.k),
          .transpose_a = shape.transpose_a == Transpose::yes,
          .transpose_b = shape.transpose_b == Transpose::yes};
}

// The timed product is at most this many multiply-adds (the largest of m, n, k halved until it fits), so a
// measurement stays a few milliseconds per library even for a huge product; the main job's GEMMs fit whole.
constexpr double kMaxTimedWork = 1 << 26;
// Its scratch C holds at most this many elements (the larger of m, n halved until it fits): a wide product
// with a short k must not cost a scratch buffer as large as its own C.
constexpr double kMaxTimedOutput = 1 << 20;
// Rounds of one product per library, alternating which goes first: at least kMinTimedRounds, then more while
// the rounds so far took less than kTimedRoundsBudget, up to kMaxTimedRounds. The fastest round of each
// library counts: interference from other work on the machine only ever slows a round down.
constexpr int kMinTimedRounds = 2;
constexpr int kMaxTimedRounds = 5;
constexpr std::chrono::milliseconds kTimedRoundsBudget{10};
// OpenBLAS stays unless oneDNN is faster by this fraction: near a tie either library is as good, and leaning
// one way makes the choice, and with it the results' last bits, the same from run to run more often.
constexpr double kOneDnnMargin = 0.05;
// A change to what is timed or to the rule above bumps kChoiceRule in gemm_auto_cache.cpp, so the machines'
// cache files stop answering with the old rule's choices.

// The class's name in the cache file: the size bounds and the transposes, e.g. "2048x128x1024 A^T".
std::string class_name(const GemmShapeClass& shape_class) {
  const auto bound = [](int bits) { return std::to_string(std::int64_t{1} << bits); };
  return bound(shape_class.m_bits) + "x" + bound(shape_class.n_bits) + "x" + bound(shape_class.k_bits) +
         (shape_class.transpose_a ? " A^T" : "") + (shape_class.transpose_b ? " B^T" : "");
}

GemmShape timed_block(GemmShape shape) {
  const auto size = [](std::int64_t extent) { return static_cast<double>(extent); };
  while (size(shape.m) * size(shape.n) > kMaxTimedOutput) {
    std::int64_t& larger = shape.m >= shape.n ? shape.m : shape.n;
    larger = (larger + 1) / 2;
  }
  while (size(shape.m) * size(shape.n) * size(shape.k) > kMaxTimedWork) {
    std::int64_t& largest =
        shape.m >= shape.n && shape.m >= shape.k ? shape.m : (shape.n >= shape.k ? shape.n : shape.k);
    largest = (largest + 1) / 2;
  }
  return shape;
}

GemmAutoChoice measure_libraries(const GemmShape& shape, const GemmProbe& probe) {
  using Clock = std::chrono::steady_clock;
  const GemmShape block = timed_block(shape);
  std::vector<float> scratch(static_cast<std::size_t>(block.m * block.n));
  const auto run = [&](GemmLibrary library) { probe(library, block.m, block.n, block.k, scratch.data()); };
  // Untimed first calls: oneDNN generates its kernels, OpenBLAS sets up its buffers, the operands reach cache.
  run(GemmLibrary::openblas);
  run(GemmLibrary::onednn);
  double openblas_seconds = std::numeric_limits<double>::infinity();
  double onednn_seconds = std::numeric_limits<double>::infinity();
  const Clock::time_point start = Clock::now();
  for (int round = 0; round < kMaxTimedRounds; ++round) {
    if (round >= kMinTimedRounds && Clock::now() - start >= kTimedRoundsBudget) break;
    for (int turn = 0; turn < 2; ++turn) {
      const bool openblas = (round + turn) % 2 == 0;
      const Clock::time_point begin = Clock::now();
      run(openblas ? GemmLibrary::openblas : GemmLibrary::onednn);
      const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
      double& best = openblas ? openblas_seconds : onednn_seconds;
      best = std::min(best, seconds);
    }
  }
  const double flops = 2.0 * static_cast<double>(block.m) * static_cast<double>(block.n) * static_cast<double>(block.k);
  // A product faster than the clock's tick: both rates unknown, OpenBLAS stays.
  const auto gflops = [&](double seconds) { return seconds > 0 ? flops / seconds * 1e-9 : 0.0; };
  const bool onednn_wins =
      onednn_seconds > 0 && openblas_seconds > 0 && onednn_seconds < openblas_seconds * (1 - kOneDnnMargin);
  return {.shape = shape,
          .library = onednn_wins ? GemmLibrary::onednn : GemmLibrary::openblas,
          .openblas_gflops = gflops(openblas_seconds),
          .onednn_gflops = gflops(onednn_seconds)};
}

// The process's choices. A class is in classes_ from the moment a thread starts measuring it: without a
// library while the measurement runs, with it once made; a measurement that throws removes its class again,
// so a later product measures afresh. The cache file is read at the first class the process meets, and a
// class it holds is chosen from it without measuring.
class GemmChoiceTable {
 public:
  static GemmChoiceTable& instance() {
    static GemmChoiceTable table;
    return table;
  }

  GemmLibrary library_for(const GemmShape& shape, const GemmProbe& probe) {
    const GemmShapeClass key = shape_class_of(shape);
    GemmAutoChoice measured;
    return settle(
        classes_, key,
        [&]() -> std::optional<GemmLibrary> {
          std::optional<GemmAutoChoice> cached = cache_->find(class_name(key));
          if (!cached) return std::nullopt;
          choices_.push_back(*cached);
          return cached->library;
        },
        [&] {
          const std::lock_guard one_at_a_time(measuring_);
          measured = measure_libraries(shape, probe);
          cache().store(class_name(key), measured);
          return measured.library;
        },
        [&](GemmLibrary) {
          choices_.push_back(measured);
          measurements_.fetch_add(1, std::memory_order_relaxed);
        });
  }

  std::string path_for(const std::string& product_class, const std::vector<std::string>& candidates,
                       const std::function<std::string()>& measure) {
    return settle(
        paths_, product_class,
        [&]() -> std::optional<std::string> {
          std::optional<std::string> cached = cache_->find_path(product_class);
          if (!cached || std::find(candidates.begin(), candidates.end(), *cached) == candidates.end()) {
            return std::nullopt;
          }
          path_choices_.push_back({.product_class = product_class, .path = *cached, .cached = true});
          return cached;
        },
        [&] {
          std::string path = measure();  // without measuring_: it may choose float32 libraries itself
          cache().store_path(product_class, path);
          return path;
        },
        [&](const std::string& path) {
          path_choices_.push_back({.product_class = product_class, .path = path, .cached = false});
        });
  }

  std::vector<GemmAutoChoice> choices() const {
    const std::lock_guard lock(mutex_);
    return choices_;
  }

  std::vector<GemmPathChoice> path_choices() const {
    const std::lock_guard lock(mutex_);
    return path_choices_;
  }

  std::int64_t measurements() const noexcept { return measurements_.load(std::memory_order_relaxed); }

  void reset() {
    const std::lock_guard lock(mutex_);
    classes_.clear();
    paths_.clear();
    path_choices_.clear();
    choices_.clear();
    cache_.reset();
  }

 private:
  GemmChoiceTable() = default;

  // The choice for `key` in `table` (classes_ or paths_): the one made, waiting while another thread makes it;
  // else the machine's cache file's (`cached`, under mutex_, records it); else this thread's `measure` (without
  // mutex_; its value written to the file there), then `publish` (under mutex_) and kept. A `measure` that throws
  // leaves the key to be measured again at its next product.
  template <typename Key, typename Value, typename Cached, typename Measure, typename Publish>
  Value settle(std::map<Key, std::optional<Value>>& table, const Key& key, Cached cached, Measure measure,
               Publish publish) {
    {
      std::unique_lock lock(mutex_);
      while (true) {
        const auto found = table.find(key);
        if (found == table.end()) break;
        if (found->second.has_value()) return *found->second;
        settled_.wait(lock);
      }
      if (!cache_) cache_ = std::make_unique<GemmAutoCache>();
      if (std::optional<Value> from_file = cached()) {
        table.emplace(key, *from_file);
        return *from_file;
      }
      table.emplace(key, std::nullopt);  // this thread measures it
    }
    std::optional<Value> value;
    try {
      value = measure();
    } catch (...) {
      {
        const std::lock_guard lock(mutex_);
        table.erase(key);
      }
      settled_.notify_all();
      throw;
    }
    {
      const std::lock_guard lock(mutex_);
      table[key] = *value;
      publish(*value);
    }
    settled_.notify_all();
    return *value;
  }

  // The cache, once the first class has created it (cache_ is only reset while no product runs).
  GemmAutoCache& cache() {
    const std::lock_guard lock(mutex_);
    return *cache_;
  }

  mutable std::mutex mutex_;         // guards classes_, paths_, path_choices_ and choices_
  std::condition_variable settled_;  // a class's measurement ended: chosen, or removed after an error
  std::map<GemmShapeClass, std::optional<GemmLibrary>> classes_;
  std::map<std::string, std::optional<std::string>> paths_;  // as classes_, for auto_gemm_path's choices
  std::vector<GemmPathChoice> path_choices_;                 // in the order made
  std::vector<GemmAutoChoice> choices_;                      // in the order made; one per class with a library
  std::unique_ptr<GemmAutoCache> cache_;                     // the machine's cache file, read at the first class met
  std::mutex measuring_;  // held through one measurement: one at a time in the process
  std::atomic<std::int64_t> measurements_{0};
};

}  // namespace

GemmLibrary auto_gemm_library(const GemmShape& shape, const GemmProbe& probe) {
  return GemmChoiceTable::instance().library_for(shape, probe);
}

std::string auto_gemm_path(const std::string& product_class, const std::vector<std::string>& candidates,
                           const std::function<std::string()>& measure) {
  return GemmChoiceTable::instance().path_for(product_class, candidates, measure);
}

std::vector<GemmPathChoice> gemm_auto_path_choices() { return GemmChoiceTable::instance().path_choices(); }

std::vector<GemmAutoChoice> gemm_auto_choices() { return GemmChoiceTable::instance().choices(); }

std::int64_t gemm_auto_measurements() noexcept { return GemmChoiceTable::instance().measurements(); }

namespace {
std::atomic<std::uint64_t> generation{0};
}  // namespace

void reset_gemm_auto_choices() {
  GemmChoiceTable::instance().reset();
  generation.fetch_add(1, std::memory_order_acq_rel);
}

std::uint64_t gemm_auto_generation() noexcept { return generation.load(std::memory_order_acquire); }

}  // namespace tp::backend::cpu

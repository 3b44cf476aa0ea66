// SPDX-License-Identifier: Apache-2.0
#pragma once
// Test-only helpers shared by the BFC allocator suites: a source that can be told to refuse, option
// builders and inspection shortcuts.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/bfc_allocator.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory::testing {

inline constexpr std::size_t kKiBytes = tp::kKiB;
inline constexpr std::size_t kMiBytes = tp::kMiB;

// Test-local source: std::aligned_alloc, refuses once `capacity` live bytes would be exceeded, records every
// size asked for. Independent of the library's own sources.
class TestSource final : public MemoryResource {
 public:
  explicit TestSource(std::size_t capacity = ~std::size_t{0}) : MemoryResource("test_source"), capacity_(capacity) {}
  ~TestSource() override { EXPECT_TRUE(live_.empty()) << live_.size() << " regions never returned"; }

  void set_capacity(std::size_t capacity) {
    std::lock_guard lock(mutex_);
    capacity_ = capacity;
  }
  std::size_t live_bytes() const {
    std::lock_guard lock(mutex_);
    return live_bytes_;
  }
  std::vector<std::size_t> attempts() const {
    std::lock_guard lock(mutex_);
    return attempts_;
  }
  std::size_t max_alignment() const noexcept override { return 4096; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag&) override {
    std::lock_guard lock(mutex_);
    attempts_.push_back(bytes);
    if (bytes > capacity_ || live_bytes_ > capacity_ - bytes) {
      OutOfMemoryReport report;
      report.allocator = name();
      report.requested_bytes = bytes;
      throw OutOfMemoryError(report);
    }
    void* ptr = std::aligned_alloc(alignment, round_up(bytes, alignment));
    if (ptr == nullptr) throw std::bad_alloc();
    live_.emplace(ptr, bytes);
    live_bytes_ += bytes;
    return ptr;
  }
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(ptr);
    EXPECT_TRUE(it != live_.end() && it->second == bytes) << "source got back a region it did not hand out";
    if (it == live_.end()) return;
    live_bytes_ -= it->second;
    live_.erase(it);
    std::free(ptr);
  }
  MemoryStats do_stats() const override {
    std::lock_guard lock(mutex_);
    MemoryStats stats;
    stats.bytes_reserved = live_bytes_;
    return stats;
  }

  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::size_t live_bytes_ = 0;
  std::unordered_map<void*, std::size_t> live_;
  std::vector<std::size_t> attempts_;
};

inline BfcOptions grow_options(std::size_t limit, std::size_t initial = 2 * kMiBytes) {
  BfcOptions options;
  options.limit_bytes = limit;
  options.growth = GrowthPolicy::grow;
  options.initial_region_bytes = initial;
  return options;
}

// One region of `region` bytes that holds everything the test allocates.
inline BfcOptions one_region(std::size_t region) { return grow_options(region, region); }

inline std::uintptr_t address(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); }

inline std::vector<std::size_t> region_sizes(const BfcAllocator& bfc) {
  std::vector<std::size_t> sizes;
  for (const auto& region : bfc.regions()) sizes.push_back(region.size);
  return sizes;
}

#define EXPECT_CONSISTENT(bfc) EXPECT_EQ((bfc).check_invariants(), "")

}  // namespace tp::memory::testing

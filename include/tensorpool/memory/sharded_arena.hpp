// SPDX-License-Identifier: Apache-2.0
#pragma once
// ShardedArena: several expandable arenas (shards) over one VirtualMemory source under one budget, so that
// threads allocating at once (a device's streams, each driven by its own thread) take different locks and walk
// different free indexes, instead of passing one arena's lock and state between their cores on every call.
// MemoryConfig::arena_shards > 1 builds it for an expandable stack (docs/memory.md, "Arena shards").
//
//   - A thread allocates from shard (its thread index mod shards): the index it holds among the process's
//     running threads (the smallest free one when it first allocates, given back at exit), so threads started
//     together get different shards while they are no more than the shards. A block is freed into the shard it came from, found by address (each shard reserves its own
//     range), whichever thread frees it.
//   - One budget: each shard may commit up to the whole budget, and the shards commit through one shared
//     source that refuses a granule taking their sum past it. A request its shard refuses (after the shard's
//     own retry) is placed once more after every other shard gave back what it holds unused (trim(): kept
//     blocks, cached granules), then fails with the shard's OutOfMemoryError.
//   - Exact statistics: bytes in use and requested, and their peaks, are counted on one cache line all
//     shards share (an atomic add per call for each; a compare-exchange only at a new peak); committed bytes
//     and their peak by the shared source, when granules come and go; allocation and free counts, the largest
//     request, retries and the mapping calls are the shards' sums and maxima; largest_free_block the largest of
//     any shard (a block never spans two).
//   - trim, compact, reset_peak, set_growth_hook and set_relocator apply to every shard. Compaction moves a
//     block only within its shard.
// What it costs: every call updates the shared counters (atomic adds on a line other threads' calls move away);
// what a shard holds serves only its own threads until trimmed, so the peak is the sum of the shards' peaks,
// which one arena shared by the same threads may undercut; a request that hits the budget takes the other
// shards' locks.
// Thread-safe: each shard has its own lock; the shared counters are atomic.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensorpool/memory/compaction.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/growth_pressure.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/virtual_memory.hpp"

namespace tp::memory {

class ShardedArena final : public MemoryResource {
 public:
  static constexpr std::size_t kMaxShards = 64;

  // `options.limit_bytes` is the budget of all shards together. Borrows `memory`, which must outlive the arena.
  // Throws tp::InvalidArgument for shards outside [1, kMaxShards], and what ExpandableArena throws for bad options.
  ShardedArena(VirtualMemory& memory, ArenaOptions options, std::size_t shards, std::string name = "expandable");
  ~ShardedArena() override;
  ShardedArena(const ShardedArena&) = delete;
  ShardedArena& operator=(const ShardedArena&) = delete;

  [[nodiscard]] std::size_t shard_count() const noexcept { return shards_.size(); }
  // Shard `index` (< shard_count()), for inspection (blocks(), check_invariants()).
  [[nodiscard]] const ExpandableArena& shard(std::size_t index) const { return *shards_.at(index); }
  // The shard this thread allocates from.
  [[nodiscard]] std::size_t this_thread_shard() const noexcept;
  // Committed bytes of all shards.
  [[nodiscard]] std::size_t committed_bytes() const noexcept;
  // "" when every shard's invariants hold and the shared counters equal the shards' sums (no call in flight).
  [[nodiscard]] std::string check_invariants() const;

  void set_growth_hook(const GrowthHook& hook);
  void set_relocator(Relocator* relocator);
  [[nodiscard]] GrowthPressureStats growth_pressure_stats() const;
  [[nodiscard]] ReuseStats reuse_stats() const;

  std::optional<std::size_t> fixed_allocated_size(std::size_t bytes) const noexcept override {
    return shards_.front()->fixed_allocated_size(bytes);
  }
  std::size_t allocation_granularity() const noexcept override { return shards_.front()->allocation_granularity(); }
  std::size_t max_alignment() const noexcept override { return shards_.front()->max_alignment(); }

 private:
  class Budget;

  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  std::size_t do_trim() override;
  CompactionResult do_compact(Relocator& relocator) override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;
  std::size_t do_allocated_size(const void* ptr, std::size_t bytes) const noexcept override;

  // The shard whose range holds `ptr`, or nullptr.
  ExpandableArena* owner_of(const void* ptr) const noexcept;
  // Trims every shard but `except`; the bytes given back.
  std::size_t trim_others(const ExpandableArena& except);
  void count_allocation(std::size_t requested, std::size_t in_use) noexcept;
  // Counts a request that leaves with `error`, refused by shard `shard`, and states the whole arena in its report.
  void refuse(OutOfMemoryError& error, std::size_t shard);

  // Counters every shard's calls change: one line, so a call moves one line between cores, not two.
  struct alignas(64) SharedCounts {
    std::atomic<std::size_t> bytes_in_use{0};
    std::atomic<std::size_t> peak_bytes_in_use{0};
    std::atomic<std::size_t> bytes_requested{0};
    std::atomic<std::size_t> peak_bytes_requested{0};
  };

  std::unique_ptr<Budget> budget_;  // declared before the shards: destroyed after them
  std::vector<std::unique_ptr<ExpandableArena>> shards_;
  // Each shard's reserved range [begin, end), in shard order, for owner_of.
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges_;
  SharedCounts counts_;
  std::atomic<std::uint64_t> retries_{0};  // requests served only after the other shards were trimmed
  std::atomic<std::uint64_t> ooms_{0};     // requests that left with an OutOfMemoryError
};

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/sharded_arena.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "memory/atomic_max.hpp"
#include "memory/thread_index.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
using detail::raise_to;

// The shards' common source: every call goes to `source`; a physical granule or commit that would take the
// shards' committed bytes past the budget is refused as the source refuses one past its capacity.
class ShardedArena::Budget final : public VirtualMemory {
 public:
  Budget(VirtualMemory& source, std::size_t limit_bytes) : source_(source), limit_bytes_(limit_bytes) {}

  const std::string& name() const noexcept override { return source_.name(); }
  std::size_t granularity() const noexcept override { return source_.granularity(); }
  std::optional<std::size_t> capacity() const noexcept override { return source_.capacity(); }
  std::size_t committed_bytes() const noexcept override { return committed_.load(std::memory_order_relaxed); }
  std::size_t peak_committed_bytes() const noexcept { return peak_committed_.load(std::memory_order_relaxed); }
  void reset_peak() noexcept { peak_committed_.store(committed_bytes(), std::memory_order_relaxed); }

  void* reserve(std::size_t bytes) override { return source_.reserve(bytes); }
  void unreserve(void* base, std::size_t bytes) noexcept override { source_.unreserve(base, bytes); }
  void commit(void* ptr, std::size_t bytes) override {
    take(bytes);
    try {
      source_.commit(ptr, bytes);
    } catch (...) {
      give_back(bytes);
      throw;
    }
  }
  void decommit(void* ptr, std::size_t bytes) noexcept override {
    source_.decommit(ptr, bytes);
    give_back(bytes);
  }
  PhysicalHandle create_physical() override {
    take(granularity());
    try {
      return source_.create_physical();
    } catch (...) {
      give_back(granularity());
      throw;
    }
  }
  void release_physical(PhysicalHandle handle) noexcept override {
    source_.release_physical(handle);
    give_back(granularity());
  }
  void map(void* ptr, PhysicalHandle handle) override { source_.map(ptr, handle); }
  void unmap(void* ptr) noexcept override { source_.unmap(ptr); }
  void copy(void* to, const void* from, std::size_t bytes) noexcept override { source_.copy(to, from, bytes); }

 private:
  void take(std::size_t bytes) {
    std::size_t committed = committed_.load(std::memory_order_relaxed);
    do {
      if (committed > limit_bytes_ || bytes > limit_bytes_ - committed) {
        auto report =
            OutOfMemoryReport::for_request(source_.name(), bytes, bytes, {}, limit_bytes_, committed, committed);
        report.detail = source_.name() + ": committing " + format_bytes(bytes) + " more would take the arena " +
                        "shards past their budget of " + format_bytes(limit_bytes_) + " (" + format_bytes(committed) +
                        " committed)";
        throw OutOfMemoryError(std::move(report));
      }
    } while (!committed_.compare_exchange_weak(committed, committed + bytes, std::memory_order_relaxed));
    raise_to(peak_committed_, committed + bytes);
  }
  void give_back(std::size_t bytes) noexcept { committed_.fetch_sub(bytes, std::memory_order_relaxed); }

  VirtualMemory& source_;
  const std::size_t limit_bytes_;
  std::atomic<std::size_t> committed_{0};
  std::atomic<std::size_t> peak_committed_{0};
};

ShardedArena::ShardedArena(VirtualMemory& memory, ArenaOptions options, std::size_t shards, std::string name)
    : MemoryResource(std::move(name)) {
  if (shards == 0 || shards > kMaxShards) {
    TP_THROW(InvalidArgument, "memory", this->name(), ": ", shards, " arena shards; give 1 to ", kMaxShards,
             " (one per thread that allocates at the same time as others, e.g. a device's streams)");
  }
  budget_ = std::make_unique<Budget>(memory, options.limit_bytes);
  shards_.reserve(shards);
  ranges_.reserve(shards);
  for (std::size_t index = 0; index < shards; ++index) {
    shards_.push_back(std::make_unique<ExpandableArena>(*budget_, options, this->name() + "/" + std::to_string(index)));
    const ExpandableArena& shard = *shards_.back();
    ranges_.emplace_back(shard.base_address(), shard.base_address() + shard.reserved_range_bytes());
  }
}

ShardedArena::~ShardedArena() = default;

std::size_t ShardedArena::this_thread_shard() const noexcept { return detail::this_thread_index() % shards_.size(); }

ExpandableArena* ShardedArena::owner_of(const void* ptr) const noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  for (std::size_t index = 0; index < ranges_.size(); ++index) {
    if (address >= ranges_[index].first && address < ranges_[index].second) return shards_[index].get();
  }
  return nullptr;
}

void ShardedArena::count_allocation(std::size_t requested, std::size_t in_use) noexcept {
  raise_to(counts_.peak_bytes_in_use, counts_.bytes_in_use.fetch_add(in_use, std::memory_order_relaxed) + in_use);
  raise_to(counts_.peak_bytes_requested,
           counts_.bytes_requested.fetch_add(requested, std::memory_order_relaxed) + requested);
}

void* ShardedArena::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  const std::size_t index = this_thread_shard();
  ExpandableArena& shard = *shards_[index];
  void* ptr = nullptr;
  try {
    ptr = allocate_validated(shard, bytes, alignment, tag);
  } catch (OutOfMemoryError& error) {
    // The shard gave back what it held and still could not commit: what the others hold unused may be the
    // budget it lacks.
    if (shards_.size() == 1 || trim_others(shard) == 0) {
      refuse(error, index);
      throw;
    }
    try {
      ptr = allocate_validated(shard, bytes, alignment, tag);
    } catch (OutOfMemoryError& again) {
      refuse(again, index);
      throw;
    }
    retries_.fetch_add(1, std::memory_order_relaxed);
  }
  count_allocation(bytes, round_up(bytes, ExpandableArena::kBlockAlignment));
  return ptr;
}

void ShardedArena::refuse(OutOfMemoryError& error, std::size_t shard) {
  ooms_.fetch_add(1, std::memory_order_relaxed);
  const std::size_t in_use = counts_.bytes_in_use.load(std::memory_order_relaxed);
  const std::size_t committed = committed_bytes();
  const std::size_t shards = shards_.size();
  error.amend([in_use, committed, shard, shards](OutOfMemoryReport& report) {
    report.in_use_bytes = in_use;
    report.reserved_bytes = committed;
    report.detail += " (shard " + std::to_string(shard) + " of " + std::to_string(shards) +
                     (shards > 1 ? ", after the other shards gave back what they held unused)" : ")");
  });
}

void ShardedArena::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  ExpandableArena* shard = owner_of(ptr);
  if (shard == nullptr) [[unlikely]] {
    char line[512];
    std::snprintf(line, sizeof line, "%s: deallocate(%p, %zu) of a pointer no shard of this arena handed out; aborting",
                  name().c_str(), ptr, bytes);
    log::write_always(log::Level::error, "memory", line);
    std::abort();
  }
  // Counted before the block goes back: the counters never count a block twice, so they cannot wrap.
  counts_.bytes_in_use.fetch_sub(round_up(bytes, ExpandableArena::kBlockAlignment), std::memory_order_relaxed);
  counts_.bytes_requested.fetch_sub(bytes, std::memory_order_relaxed);
  deallocate_validated(*shard, ptr, bytes);
}

std::size_t ShardedArena::trim_others(const ExpandableArena& except) {
  std::size_t released = 0;
  for (const std::unique_ptr<ExpandableArena>& shard : shards_) {
    if (shard.get() != &except) released += shard->trim();
  }
  return released;
}

std::size_t ShardedArena::do_trim() {
  std::size_t released = 0;
  for (const std::unique_ptr<ExpandableArena>& shard : shards_) released += shard->trim();
  return released;
}

CompactionResult ShardedArena::do_compact(Relocator& relocator) {
  CompactionResult merged;
  merged.committed_before = committed_bytes();
  for (const std::unique_ptr<ExpandableArena>& shard : shards_) {
    const CompactionResult result = shard->compact(relocator);
    merged.ran = merged.ran || result.ran;
    merged.blocks_moved += result.blocks_moved;
    merged.bytes_copied += result.bytes_copied;
    merged.bytes_remapped += result.bytes_remapped;
    merged.granules_freed += result.granules_freed;
    merged.granularity = result.granularity;
  }
  merged.committed_after = committed_bytes();
  return merged;
}

MemoryStats ShardedArena::do_stats() const {
  MemoryStats merged;
  for (const std::unique_ptr<ExpandableArena>& shard : shards_) {
    const MemoryStats stats = shard->stats();
    merged.num_allocs += stats.num_allocs;
    merged.num_frees += stats.num_frees;
    merged.largest_alloc = std::max(merged.largest_alloc, stats.largest_alloc);
    merged.largest_free_block = std::max(merged.largest_free_block, stats.largest_free_block);
    merged.num_retries += stats.num_retries;
    merged.upstream_allocs += stats.upstream_allocs;
    merged.upstream_frees += stats.upstream_frees;
    merged.num_compactions += stats.num_compactions;
    merged.bytes_compacted += stats.bytes_compacted;
  }
  merged.num_retries += retries_.load(std::memory_order_relaxed);
  merged.num_ooms = ooms_.load(std::memory_order_relaxed);
  merged.bytes_in_use = counts_.bytes_in_use.load(std::memory_order_relaxed);
  merged.peak_bytes_in_use = counts_.peak_bytes_in_use.load(std::memory_order_relaxed);
  merged.bytes_requested = counts_.bytes_requested.load(std::memory_order_relaxed);
  merged.peak_bytes_requested = counts_.peak_bytes_requested.load(std::memory_order_relaxed);
  merged.bytes_reserved = budget_->committed_bytes();
  merged.peak_bytes_reserved = budget_->peak_committed_bytes();
  merged.bytes_limit = shards_.front()->options().limit_bytes;
  return merged;
}

void ShardedArena::do_reset_peak() {
  for (const std::unique_ptr<ExpandableArena>& shard : shards_) shard->reset_peak();
  counts_.peak_bytes_in_use.store(counts_.bytes_in_use.load(std::memory_order_relaxed), std::memory_order_relaxed);
  counts_.peak_bytes_requested.store(counts_.bytes_requested.load(std::memory_order_relaxed),
                                     std::memory_order_relaxed);
  budget_->reset_peak();
}

std::size_t ShardedArena::do_allocated_size(const void* ptr, std::size_t bytes) const noexcept {
  const ExpandableArena* shard = owner_of(ptr);
  return shard != nullptr ? shard->allocated_size(ptr, bytes) : round_up(bytes, ExpandableArena::kBlockAlignment);
}

std::size_t ShardedArena::committed_bytes() const noexcept { return budget_->committed_bytes(); }

std::string ShardedArena::check_invariants() const {
  std::size_t in_use = 0;
  std::size_t requested = 0;
  std::size_t committed = 0;
  for (const std::unique_ptr<ExpandableArena>& shard : shards_) {
    if (std::string problem = shard->check_invariants(); !problem.empty()) return shard->name() + ": " + problem;
    const MemoryStats stats = shard->stats();
    in_use += stats.bytes_in_use;
    requested += stats.bytes_requested;
    committed += stats.bytes_reserved;
  }
  if (in_use != counts_.bytes_in_use.load(std::memory_order_relaxed)) {
    return "bytes in use " + std::to_string(counts_.bytes_in_use.load()) + " != the shards' " + std::to_string(in_use);
  }
  if (requested != counts_.bytes_requested.load(std::memory_order_relaxed)) {
    return "bytes requested " + std::to_string(counts_.bytes_requested.load()) + " != the shards' " +
           std::to_string(requested);
  }
  if (committed != budget_->committed_bytes()) {
    return "committed bytes " + std::to_string(budget_->committed_bytes()) + " != the shards' " +
           std::to_string(committed);
  }
  if (committed > shards_.front()->options().limit_bytes) return "committed bytes exceed the budget";
  return "";
}

void ShardedArena::set_growth_hook(const GrowthHook& hook) {
  for (const std::unique_ptr<ExpandableArena>& shard : shards_) shard->set_growth_hook(hook);
}

void ShardedArena::set_relocator(Relocator* relocator) {
  for (const std::unique_ptr<ExpandableArena>& shard : shards_) shard->set_relocator(relocator);
}

GrowthPressureStats ShardedArena::growth_pressure_stats() const {
  GrowthPressureStats merged;
  for (const std::unique_ptr<ExpandableArena>& shard : shards_) {
    const GrowthPressureStats stats = shard->growth_pressure_stats();
    merged.growth_requests += stats.growth_requests;
    merged.hooks_run += stats.hooks_run;
    merged.hooks_released += stats.hooks_released;
    merged.compactions += stats.compactions;
    merged.evacuations += stats.evacuations;
    merged.growth_avoided += stats.growth_avoided;
    merged.blocks_moved += stats.blocks_moved;
    merged.bytes_copied += stats.bytes_copied;
    merged.bytes_remapped += stats.bytes_remapped;
    merged.granules_freed += stats.granules_freed;
  }
  return merged;
}

ReuseStats ShardedArena::reuse_stats() const {
  ReuseStats merged;
  for (const std::unique_ptr<ExpandableArena>& shard : shards_) {
    const ReuseStats stats = shard->reuse_stats();
    merged.kept_blocks += stats.kept_blocks;
    merged.kept_bytes += stats.kept_bytes;
    merged.keeps += stats.keeps;
    merged.hits += stats.hits;
    merged.flushes += stats.flushes;
    merged.pauses += stats.pauses;
    merged.paused = merged.paused || stats.paused;
  }
  return merged;
}

}  // namespace tp::memory

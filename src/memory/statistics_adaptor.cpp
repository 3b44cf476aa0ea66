// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/statistics_adaptor.hpp"

#include <algorithm>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

// Shard indices, one per running thread that counts, shared by every StatisticsAdaptor: an index is taken at
// a thread's first count and given back at its exit, so at most one running thread owns an index. The pool's
// mutex orders a thread's last counts before the next owner's first. Never destroyed: threads may exit after
// static destruction has begun.
struct ShardIndexPool {
  std::mutex mutex;               // guards both below
  std::vector<std::size_t> free;  // indices given back, for reuse
  std::size_t next = 0;           // indices handed out so far
};

ShardIndexPool& shard_index_pool() {
  static auto* pool = new ShardIndexPool;  // NOLINT(cppcoreguidelines-owning-memory): leaked on purpose, above
  return *pool;
}

constexpr std::size_t kNoShardIndex = std::numeric_limits<std::size_t>::max();
// This thread's index, kNoShardIndex before its first count. A plain thread_local (no destructor), so reading
// it costs no initialization check: the per-call path.
thread_local std::size_t local_shard_index = kNoShardIndex;

// Gives this thread's index back at its exit; constructed by the thread's first count.
struct ShardIndexReturn {
  bool held = false;
  ShardIndexReturn() = default;
  ShardIndexReturn(const ShardIndexReturn&) = delete;
  ShardIndexReturn& operator=(const ShardIndexReturn&) = delete;
  ~ShardIndexReturn() {
    if (!held) return;
    ShardIndexPool& pool = shard_index_pool();
    const std::lock_guard lock(pool.mutex);
    try {
      pool.free.push_back(local_shard_index);
    } catch (...) {  // no memory to keep the index: it is never reused (one shard stays idle)
    }
    local_shard_index = StatisticsAdaptor::kShards;  // counts from later destructors go to the shared shard
  }
};
thread_local ShardIndexReturn local_shard_index_return;

// Takes an index for this thread: a given-back one, else the next; kShards (the shared shard) when all are
// taken or the thread is exiting.
[[gnu::noinline]] std::size_t take_shard_index() noexcept {
  ShardIndexPool& pool = shard_index_pool();
  std::size_t index = StatisticsAdaptor::kShards;
  {
    const std::lock_guard lock(pool.mutex);
    if (!pool.free.empty()) {
      index = pool.free.back();
      pool.free.pop_back();
    } else if (pool.next < StatisticsAdaptor::kShards) {
      index = pool.next++;
    }
  }
  local_shard_index = index;
  if (index < StatisticsAdaptor::kShards) local_shard_index_return.held = true;
  return index;
}

// Adds to a counter only this thread writes: a plain load and store, no locked instruction.
void add_owned(std::atomic<std::uint64_t>& counter, std::uint64_t value) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + value, std::memory_order_relaxed);
}

// Raises `maximum` to `value` unless it is already at least that; a load alone when it is.
void raise_to(std::atomic<std::size_t>& maximum, std::size_t value) noexcept {
  std::size_t current = maximum.load(std::memory_order_relaxed);
  while (current < value && !maximum.compare_exchange_weak(current, value, std::memory_order_relaxed)) {}
}

}  // namespace

StatisticsAdaptor::StatisticsAdaptor(std::unique_ptr<MemoryResource> upstream, std::string name, RequestCounts counts)
    : ResourceAdaptor(std::move(upstream), std::move(name)), counts_(counts) {}

StatisticsAdaptor::StatisticsAdaptor(MemoryResource& upstream, std::string name, RequestCounts counts)
    : ResourceAdaptor(upstream, std::move(name)), counts_(counts) {}

// The per-call path: this thread's own shard, added to without a locked instruction; the first count of a
// thread, and the counts of a thread without an index, go through count_slowly.
inline void StatisticsAdaptor::count_allocation(std::size_t bytes) noexcept {
  const std::size_t index = local_shard_index;
  if (index >= kShards) [[unlikely]] {
    count_slowly(bytes, 0);
    return;
  }
  Shard& counts = shards_[index];
  add_owned(counts.allocs, 1);
  if (bytes > counts.largest_alloc.load(std::memory_order_relaxed)) {
    counts.largest_alloc.store(bytes, std::memory_order_relaxed);
  }
}

inline void StatisticsAdaptor::count_free() noexcept {
  const std::size_t index = local_shard_index;
  if (index >= kShards) [[unlikely]] {
    count_slowly(0, 1);
    return;
  }
  add_owned(shards_[index].frees, 1);
}

void StatisticsAdaptor::count_slowly(std::size_t allocated_bytes, std::uint64_t frees) noexcept {
  if (local_shard_index == kNoShardIndex && take_shard_index() < kShards) {
    if (allocated_bytes != 0) count_allocation(allocated_bytes);
    if (frees != 0) count_free();
    return;
  }
  Shard& shared = shards_[kShards];
  if (allocated_bytes != 0) {
    shared.allocs.fetch_add(1, std::memory_order_relaxed);
    raise_to(shared.largest_alloc, allocated_bytes);
  }
  shared.frees.fetch_add(frees, std::memory_order_relaxed);
}

void* StatisticsAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  void* ptr = nullptr;
  try {
    ptr = upstream_allocate(bytes, alignment, tag);
  } catch (OutOfMemoryError& error) {
    num_ooms_.fetch_add(1, std::memory_order_relaxed);
    // The refusing layer counts in-use bytes after rounding, this one as asked: with both, the report gives
    // the bytes lost to rounding (internal fragmentation).
    const std::size_t requested_in_use = counts_ == RequestCounts::own
                                             ? bytes_requested_.load(std::memory_order_relaxed)
                                             : upstream().stats().bytes_requested;
    error.amend([requested_in_use](OutOfMemoryReport& report) { report.requested_in_use_bytes = requested_in_use; });
    throw;
  }
  if (counts_ == RequestCounts::own) {
    const std::size_t requested = bytes_requested_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    raise_to(peak_bytes_requested_, requested);
    count_allocation(bytes);
  }
  return ptr;
}

void StatisticsAdaptor::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  // Counted before the block goes back: bytes_requested_ never counts a block twice, so it cannot wrap.
  if (counts_ == RequestCounts::own) {
    bytes_requested_.fetch_sub(bytes, std::memory_order_relaxed);
    count_free();
  }
  upstream_deallocate(ptr, bytes);
}

MemoryStats StatisticsAdaptor::do_stats() const {
  MemoryStats stats = upstream().stats();
  stats.num_ooms = num_ooms_.load(std::memory_order_relaxed);
  if (counts_ == RequestCounts::upstream) return stats;
  stats.bytes_requested = bytes_requested_.load(std::memory_order_relaxed);
  stats.peak_bytes_requested = peak_bytes_requested_.load(std::memory_order_relaxed);
  stats.num_allocs = 0;
  stats.num_frees = 0;
  stats.largest_alloc = 0;
  for (const Shard& counts : shards_) {
    stats.num_allocs += counts.allocs.load(std::memory_order_relaxed);
    stats.num_frees += counts.frees.load(std::memory_order_relaxed);
    stats.largest_alloc = std::max(stats.largest_alloc, counts.largest_alloc.load(std::memory_order_relaxed));
  }
  return stats;
}

void StatisticsAdaptor::do_reset_peak() {
  upstream().reset_peak();
  peak_bytes_requested_.store(bytes_requested_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/thread_cache_adaptor.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "memory/atomic_max.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace detail {

// A test-and-set lock: one atomic exchange to take it, a plain release store to drop it. Its owner thread
// takes it on every cached operation and finds it free unless a flush (rare) holds it.
class ThreadCacheLock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// A cached block and what the allocator set aside for it (its footprint, counted in use while a caller holds it).
struct CachedBlock {
  void* ptr = nullptr;
  std::size_t allocated = 0;
};

// Blocks of one requested size; the most recently cached is blocks[count - 1]. `count` is written under the
// cache's lock (by the owner, or by a flusher emptying the bin) and read by the owner without it: only the
// owner adds blocks, so a count of 0 read without the lock is a miss whatever a flusher does meanwhile.
// `size` is written by the owner alone, under the lock (a flusher reads it), so the owner reads it without.
struct ThreadCacheBin {
  std::size_t size = 0;  // meaningful while count > 0
  std::atomic<std::size_t> count{0};
  std::array<CachedBlock, ThreadCacheAdaptor::kBlocksPerBin> blocks{};

  std::size_t held() const noexcept { return count.load(std::memory_order_relaxed); }
  void set_held(std::size_t blocks_held) noexcept { count.store(blocks_held, std::memory_order_relaxed); }
};

// What a cache did that the allocator did not see: the caller-facing counts are the allocator's plus these.
struct ThreadCacheCounts {
  std::uint64_t hits = 0;      // allocations served from the cache
  std::uint64_t absorbed = 0;  // frees kept in the cache
  std::uint64_t returned = 0;  // kept blocks later given back upstream (the allocator counts those frees)

  void add(const ThreadCacheCounts& other) noexcept {
    hits += other.hits;
    absorbed += other.absorbed;
    returned += other.returned;
  }
};

// One thread's cache for one adaptor. Invariant: bytes = sum over bins of size x count, allocated = sum of the
// cached blocks' footprints, blocks = sum of count = counts.absorbed - counts.hits - counts.returned, bytes <=
// the adaptor's max_bytes; every cached block is live in *upstream. upstream is null once the cache is detached (its thread exited or its adaptor was
// destroyed), and then the cache is empty.
struct ThreadCache {
  ThreadCacheLock lock;  // guards everything below
  MemoryResource* upstream = nullptr;
  std::size_t bytes = 0;      // as requested
  std::size_t allocated = 0;  // as the allocator set aside (the footprints)
  std::size_t blocks = 0;
  ThreadCacheCounts counts;
  std::array<ThreadCacheBin, ThreadCacheAdaptor::kBins> bins{};

  // Returns every cached block upstream; the caller holds `lock`. The number of blocks returned.
  std::size_t drain() noexcept {
    const std::size_t returned = blocks;
    for (ThreadCacheBin& bin : bins) {
      for (std::size_t i = 0; i < bin.held(); ++i) upstream->deallocate(bin.blocks[i].ptr, bin.size);
      bin.set_held(0);
    }
    bytes = 0;
    allocated = 0;
    blocks = 0;
    counts.returned += returned;
    return returned;
  }
};

struct ThreadCacheRegistry {
  std::mutex mutex;  // guards caches and retired; taken before any cache's lock
  std::vector<std::shared_ptr<ThreadCache>> caches;
  ThreadCacheCounts retired;  // the counts of caches whose threads exited
};

}  // namespace detail

namespace {

using detail::CachedBlock;
using detail::ThreadCache;
using detail::ThreadCacheBin;
using detail::ThreadCacheCounts;
using detail::ThreadCacheRegistry;

std::atomic<std::uint64_t> next_thread_cache_id{1};

// One of this thread's caches. The registry is weak: the adaptor owns it, and it expires with the adaptor.
struct LocalCacheEntry {
  std::uint64_t id = 0;
  std::shared_ptr<ThreadCache> cache;
  std::weak_ptr<ThreadCacheRegistry> registry;
};

// At thread exit: give the blocks back and leave the registry, unless the adaptor already detached the cache.
// Under the registry mutex, so the adaptor (whose destructor takes it) outlives the returns.
void retire(const LocalCacheEntry& entry) noexcept {
  const std::shared_ptr<ThreadCacheRegistry> registry = entry.registry.lock();
  if (registry == nullptr) return;
  const std::lock_guard registry_lock(registry->mutex);
  {
    const std::lock_guard cache_lock(entry.cache->lock);
    if (entry.cache->upstream != nullptr) entry.cache->drain();
    entry.cache->upstream = nullptr;
    registry->retired.add(entry.cache->counts);
  }
  std::erase(registry->caches, entry.cache);
}

// This thread's caches, one per adaptor it has used.
struct LocalCaches {
  std::vector<LocalCacheEntry> entries;

  LocalCaches() = default;
  LocalCaches(const LocalCaches&) = delete;
  LocalCaches& operator=(const LocalCaches&) = delete;
  ~LocalCaches();
};

// Set once this thread's LocalCaches is destroyed: a free from a later thread_local destructor goes upstream.
thread_local bool local_caches_destroyed = false;
thread_local LocalCaches local_caches;
// The latest lookup among local_caches (id 0: none; adaptor ids start at 1). Plain thread_locals with no
// destructor, so reading them needs no thread_local initialization check: the per-call path.
thread_local std::uint64_t local_last_id = 0;
thread_local ThreadCache* local_last = nullptr;

LocalCaches::~LocalCaches() {
  local_caches_destroyed = true;
  local_last_id = 0;
  local_last = nullptr;
  for (const LocalCacheEntry& entry : entries) retire(entry);
}

// Direct-mapped: the top bits of a multiplicative hash of the size.
std::size_t thread_cache_bin(std::size_t bytes) noexcept {
  constexpr int kShift = 64 - std::countr_zero(ThreadCacheAdaptor::kBins);
  return static_cast<std::size_t>((static_cast<std::uint64_t>(bytes) * 0x9E3779B97F4A7C15ULL) >> kShift);
}

bool aligned_to(const void* ptr, std::size_t alignment) noexcept {
  return (reinterpret_cast<std::uintptr_t>(ptr) & (alignment - 1)) == 0;
}

ThreadCacheOptions checked_options(ThreadCacheOptions options, const std::string& name) {
  if (options.max_bytes == 0 || options.max_block_bytes == 0 || options.max_block_bytes > options.max_bytes) {
    TP_THROW(InvalidArgument, "memory", name, ": max_bytes = ", options.max_bytes,
             " and max_block_bytes = ", options.max_block_bytes,
             " must both be positive with max_block_bytes <= max_bytes; e.g. 4 MiB and 1 MiB");
  }
  return options;
}

}  // namespace

static_assert(std::has_single_bit(ThreadCacheAdaptor::kBins));

ThreadCacheAdaptor::ThreadCacheAdaptor(std::unique_ptr<MemoryResource> upstream, ThreadCacheOptions options,
                                       std::string name)
    : ResourceAdaptor(std::move(upstream), std::move(name)),
      options_(checked_options(options, this->name())),
      id_(next_thread_cache_id.fetch_add(1, std::memory_order_relaxed)),
      registry_(std::make_shared<ThreadCacheRegistry>()) {}

ThreadCacheAdaptor::ThreadCacheAdaptor(MemoryResource& upstream, ThreadCacheOptions options, std::string name)
    : ResourceAdaptor(upstream, std::move(name)),
      options_(checked_options(options, this->name())),
      id_(next_thread_cache_id.fetch_add(1, std::memory_order_relaxed)),
      registry_(std::make_shared<ThreadCacheRegistry>()) {}

ThreadCacheAdaptor::~ThreadCacheAdaptor() {
  const std::lock_guard registry_lock(registry_->mutex);
  for (const std::shared_ptr<ThreadCache>& cache : registry_->caches) {
    const std::lock_guard cache_lock(cache->lock);
    if (cache->upstream != nullptr) cache->drain();
    cache->upstream = nullptr;
  }
  registry_->caches.clear();
}

namespace {

// This thread's cache for adaptor `id`, found among its entries or created and registered: the path of a
// thread's first call to an adaptor, or of a switch between adaptors, kept out of the per-call path.
[[gnu::noinline]] ThreadCache& find_or_add_local_cache(std::uint64_t id,
                                                       const std::shared_ptr<ThreadCacheRegistry>& registry,
                                                       MemoryResource& upstream) {
  LocalCaches& local = local_caches;
  auto found = std::find_if(local.entries.begin(), local.entries.end(),
                            [id](const LocalCacheEntry& entry) { return entry.id == id; });
  if (found == local.entries.end()) {
    // Entries of destroyed adaptors are dropped here (their caches were drained and detached).
    std::erase_if(local.entries, [](const LocalCacheEntry& entry) { return entry.registry.expired(); });
    local.entries.reserve(local.entries.size() + 1);
    auto cache = std::make_shared<ThreadCache>();
    cache->upstream = &upstream;
    {
      const std::lock_guard registry_lock(registry->mutex);
      registry->caches.push_back(cache);
    }
    local.entries.push_back(LocalCacheEntry{id, std::move(cache), registry});
    found = local.entries.end() - 1;
  }
  local_last_id = id;
  local_last = found->cache.get();
  return *local_last;
}

}  // namespace

ThreadCache& ThreadCacheAdaptor::local_cache() {
  if (local_last_id == id_) [[likely]] {
    return *local_last;
  }
  return find_or_add_local_cache(id_, registry_, upstream());
}

std::size_t ThreadCacheAdaptor::footprint(const void* ptr, std::size_t bytes) const noexcept {
  return std::max(upstream().allocated_size(ptr, bytes), round_up(bytes, upstream().allocation_granularity()));
}

void ThreadCacheAdaptor::add_in_use(std::size_t allocated) noexcept {
  detail::raise_to(peak_in_use_, in_use_.fetch_add(allocated, std::memory_order_relaxed) + allocated);
}

// The hit path is kept free of calls but the atomics: this thread's cache for this adaptor is the last one
// it looked up (local_last), else the out-of-line look-up runs (a thread's first call, a switch of adaptors).
void* ThreadCacheAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  if (bytes <= options_.max_block_bytes) {
    ThreadCache* cache = local_last_id == id_ ? local_last : nullptr;
    if (cache == nullptr && !local_caches_destroyed) cache = &local_cache();
    if (cache != nullptr) {
      ThreadCacheBin& bin = cache->bins[thread_cache_bin(bytes)];
      CachedBlock block;
      if (bin.size == bytes && bin.held() > 0) {  // else a miss, known without the lock (ThreadCacheBin)
        cache->lock.lock();
        const std::size_t held = bin.held();
        if (held > 0 && aligned_to(bin.blocks[held - 1].ptr, alignment)) {
          block = bin.blocks[held - 1];
          bin.set_held(held - 1);
          cache->bytes -= bytes;
          cache->allocated -= block.allocated;
          --cache->blocks;
          ++cache->counts.hits;
        }
        cache->lock.unlock();
      }
      if (block.ptr != nullptr) {
        add_in_use(block.allocated);
        return block.ptr;
      }
    }
  }
  // The footprint: promised by the allocator, or given with the block (no second look-up).
  const std::optional<std::size_t> fixed = upstream().fixed_allocated_size(bytes);
  const SizedAllocation block = allocate_with_retry(bytes, alignment, tag, !fixed.has_value());
  add_in_use(fixed ? *fixed : std::max(block.allocated, round_up(bytes, upstream().allocation_granularity())));
  return block.ptr;
}

MemoryResource::SizedAllocation ThreadCacheAdaptor::allocate_with_retry(std::size_t bytes, std::size_t alignment,
                                                                        const AllocationTag& tag, bool sized) {
  const auto allocate_once = [&] {
    return sized ? allocate_sized_validated(upstream(), bytes, alignment, tag)
                 : SizedAllocation{upstream_allocate(bytes, alignment, tag), 0};
  };
  std::size_t flushed = 0;
  try {
    return allocate_once();
  } catch (const OutOfMemoryError&) {
    flushed = flush();
    if (flushed == 0) throw;
  }
  try {
    const SizedAllocation block = allocate_once();
    num_retries_.fetch_add(1, std::memory_order_relaxed);
    return block;
  } catch (OutOfMemoryError& error) {
    const std::string line = "The thread caches returned " + std::to_string(flushed) +
                             " cached block(s) to the allocator and the request still failed.";
    error.amend([&line](OutOfMemoryReport& report) { report.detail += report.detail.empty() ? line : "\n  " + line; });
    throw;
  }
}

void ThreadCacheAdaptor::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  // Free to callers from here on, wherever the block goes: its footprint leaves in_use_ before the block can be
  // handed out again (under the cache lock when the cache keeps it, else in the allocator's own free).
  const std::optional<std::size_t> fixed = upstream().fixed_allocated_size(bytes);
  if (bytes <= options_.max_block_bytes) {
    ThreadCache* cache = local_last_id == id_ ? local_last : nullptr;
    if (cache == nullptr && !local_caches_destroyed) {
      try {
        cache = &local_cache();
      } catch (...) {
        cache = nullptr;  // no memory for this thread's first cache: the block goes upstream
      }
    }
    if (cache != nullptr) {
      ThreadCacheBin& bin = cache->bins[thread_cache_bin(bytes)];
      const std::lock_guard lock(cache->lock);
      if (bin.held() > 0 && bin.size != bytes) return_blocks(*cache, bin);  // the bin now serves the newer size
      const std::size_t held = bin.held();
      if (held < kBlocksPerBin && cache->bytes + bytes <= options_.max_bytes) {
        const std::size_t allocated = fixed ? *fixed : footprint(ptr, bytes);
        in_use_.fetch_sub(allocated, std::memory_order_relaxed);
        bin.size = bytes;
        bin.blocks[held] = CachedBlock{ptr, allocated};
        bin.set_held(held + 1);
        cache->bytes += bytes;
        cache->allocated += allocated;
        ++cache->blocks;
        ++cache->counts.absorbed;
        return;
      }
    }
  }
  if (fixed) {
    in_use_.fetch_sub(*fixed, std::memory_order_relaxed);
    upstream_deallocate(ptr, bytes);
  } else {
    deallocate_releasing_validated(upstream(), ptr, bytes, in_use_);  // the footprint found by the free itself
  }
}

void ThreadCacheAdaptor::return_blocks(ThreadCache& cache, ThreadCacheBin& bin) noexcept {
  const std::size_t held = bin.held();
  for (std::size_t i = 0; i < held; ++i) {
    upstream_deallocate(bin.blocks[i].ptr, bin.size);
    cache.allocated -= bin.blocks[i].allocated;
  }
  cache.bytes -= bin.size * held;
  cache.blocks -= held;
  cache.counts.returned += held;
  bin.set_held(0);
}

std::size_t ThreadCacheAdaptor::flush() noexcept {
  std::size_t returned = 0;
  const std::lock_guard registry_lock(registry_->mutex);
  for (const std::shared_ptr<ThreadCache>& cache : registry_->caches) {
    const std::lock_guard cache_lock(cache->lock);
    if (cache->upstream != nullptr) returned += cache->drain();
  }
  return returned;
}

std::size_t ThreadCacheAdaptor::do_trim() {
  flush();
  return upstream().trim();
}

CompactionResult ThreadCacheAdaptor::do_compact(Relocator& relocator) {
  flush();
  return upstream().compact(relocator);
}

std::size_t ThreadCacheAdaptor::cached_blocks() const {
  std::size_t blocks = 0;
  const std::lock_guard registry_lock(registry_->mutex);
  for (const std::shared_ptr<ThreadCache>& cache : registry_->caches) {
    const std::lock_guard cache_lock(cache->lock);
    blocks += cache->blocks;
  }
  return blocks;
}

std::size_t ThreadCacheAdaptor::cached_bytes() const {
  std::size_t bytes = 0;
  const std::lock_guard registry_lock(registry_->mutex);
  for (const std::shared_ptr<ThreadCache>& cache : registry_->caches) {
    const std::lock_guard cache_lock(cache->lock);
    bytes += cache->bytes;
  }
  return bytes;
}

std::size_t ThreadCacheAdaptor::cached_allocated_bytes() const {
  std::size_t bytes = 0;
  const std::lock_guard registry_lock(registry_->mutex);
  for (const std::shared_ptr<ThreadCache>& cache : registry_->caches) {
    const std::lock_guard cache_lock(cache->lock);
    bytes += cache->allocated;
  }
  return bytes;
}

MemoryStats ThreadCacheAdaptor::do_stats() const {
  MemoryStats stats = upstream().stats();
  std::size_t cached_requested = 0;
  std::size_t largest_cached = 0;
  ThreadCacheCounts counts;
  {
    const std::lock_guard registry_lock(registry_->mutex);
    counts = registry_->retired;
    for (const std::shared_ptr<ThreadCache>& cache : registry_->caches) {
      const std::lock_guard cache_lock(cache->lock);
      counts.add(cache->counts);
      cached_requested += cache->bytes;
      for (const ThreadCacheBin& bin : cache->bins) {
        for (std::size_t i = 0; i < bin.held(); ++i) largest_cached = std::max(largest_cached, bin.blocks[i].allocated);
      }
    }
  }
  // In use and its peak are this layer's own: what callers hold, a cached block being free to them.
  stats.bytes_in_use = in_use_.load(std::memory_order_relaxed);
  stats.peak_bytes_in_use = peak_in_use_.load(std::memory_order_relaxed);
  stats.bytes_requested -= std::min(cached_requested, stats.bytes_requested);
  stats.num_allocs += counts.hits;
  // The allocator counted a kept block's free when the cache gave it back: count it once, when it was kept.
  stats.num_frees += counts.absorbed - counts.returned;
  stats.largest_free_block = std::max(stats.largest_free_block, largest_cached);
  stats.num_retries += num_retries_.load(std::memory_order_relaxed);
  return stats;
}

void ThreadCacheAdaptor::do_reset_peak() {
  upstream().reset_peak();
  peak_in_use_.store(in_use_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace tp::memory

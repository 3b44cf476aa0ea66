// SPDX-License-Identifier: Apache-2.0
#pragma once
// ThreadCacheAdaptor: a per-thread cache of recently freed small blocks in front of an allocator, so that the
// common allocate/free pair of a thread that reuses sizes takes no allocator lock.
//
// Each thread that uses the adaptor gets its own cache (created on its first call): kBins bins, a bin holding
// up to kBlocksPerBin freed blocks of one exact requested size (direct-mapped by size). deallocate(ptr, n)
// with n <= max_block_bytes keeps the block in the calling thread's bin for n while the cache holds at most
// max_bytes (requested sizes); allocate(n) pops the most recently cached block of size n, when it is aligned
// as asked. Everything else goes upstream. A bin that holds another size gives its blocks back upstream when a
// new size claims it.
//
// Cached blocks stay allocated upstream: they are free to callers, held by the stack (PyTorch's "inactive"
// blocks). stats() reports them so: bytes_in_use and peak_bytes_in_use are this adaptor's own counts of the
// footprints (what the allocator set aside) of the blocks callers hold, raised on every allocation served and
// lowered on every free, whether the block goes to a cache or upstream; so in use and its peak are exact, as
// if there were no cache. bytes_requested excludes the cached blocks; num_allocs adds the allocations served
// from a cache, and num_frees counts a free when the caller made it (not again when a cache gives the block
// back); bytes_reserved includes them (reserved - in use = the allocator's free bytes + the cached
// footprints, cached_allocated_bytes()), and a cached block counts as a free block for largest_free_block.
// A block's footprint is upstream().fixed_allocated_size(n) when the allocator promises one (the expandable
// arena, BFC with BfcSplit::exact: no look-up, so a cached pair takes no allocator lock), else the size the
// allocator returns with the block it allocates (allocate_sized_validated) and, at a free, the size the allocator
// finds as it takes the block back (deallocate_releasing_validated: in_use drops under the allocator's lock, in
// the same step) or, for a block the cache keeps, its allocated_size() (one look-up under the allocator's lock:
// TensorFlow's BFC, whose chunks depend on its free list).
//
// Caches are emptied (their blocks returned upstream) by flush(), by trim() before the allocator trims and by
// compact() before it compacts, by an upstream tp::OutOfMemoryError (every thread's cache is flushed and the
// request retried once, counted in num_retries when it then succeeds), at thread exit, and when the adaptor is
// destroyed.
//
// Streams: deallocate carries no stream; a device hands a block back to its stack only once the work queued
// on the block's stream has completed (stream-ordered reuse, docs/ARCHITECTURE), so a cached block is as safe
// to reuse on any stream as a block the allocator itself hands out again.
//
// Thread safety: each cache has a spin lock taken by its owner thread on every operation that takes or keeps a
// block (uncontended unless a flush runs) and by flushers; a request whose bin holds no block of its size
// takes no lock (only the owner adds blocks, so an empty bin stays empty until it does). The registry mutex
// guards the set of caches. Lock order: registry,
// then a cache; the allocator is called with at most one cache lock held, never the other way round.
// Lifetime: a thread's caches outlive neither the thread (its thread_local destructor flushes them) nor the
// adaptor (the destructor flushes and detaches every cache; a thread exiting later finds its cache detached).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/resource_adaptor.hpp"

namespace tp::memory {

namespace detail {
struct ThreadCache;
struct ThreadCacheBin;
struct ThreadCacheRegistry;
}  // namespace detail

struct ThreadCacheOptions {
  std::size_t max_bytes = 4 * kMiB;        // per thread: the most bytes (as requested) one cache holds
  std::size_t max_block_bytes = 1 * kMiB;  // larger requests never enter a cache
};

class ThreadCacheAdaptor final : public ResourceAdaptor {
 public:
  static constexpr std::size_t kBins = 64;
  static constexpr std::size_t kBlocksPerBin = 8;

  // Throws tp::InvalidArgument for a null upstream, max_bytes == 0, max_block_bytes == 0 or
  // max_block_bytes > max_bytes.
  ThreadCacheAdaptor(std::unique_ptr<MemoryResource> upstream, ThreadCacheOptions options = {},
                     std::string name = "thread_cache");
  ThreadCacheAdaptor(MemoryResource& upstream, ThreadCacheOptions options = {}, std::string name = "thread_cache");
  ~ThreadCacheAdaptor() override;

  const ThreadCacheOptions& options() const noexcept { return options_; }
  // Returns every thread's cached blocks upstream; the number of blocks returned.
  std::size_t flush() noexcept;
  // Blocks and bytes (as requested) held by all caches now.
  [[nodiscard]] std::size_t cached_blocks() const;
  [[nodiscard]] std::size_t cached_bytes() const;
  // The allocator's footprints of the blocks all caches hold now: reserved bytes free to callers.
  [[nodiscard]] std::size_t cached_allocated_bytes() const;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  std::size_t do_trim() override;
  // Flushes every cache first: a cached block has no owner that could let it move, and the room it takes back
  // is what compaction can use.
  CompactionResult do_compact(Relocator& relocator) override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;

  detail::ThreadCache& local_cache();
  // Gives the blocks of a bin that a new size claims back upstream (the caller holds the cache's lock); out of
  // line, as it is rare.
  [[gnu::noinline]] void return_blocks(detail::ThreadCache& cache, detail::ThreadCacheBin& bin) noexcept;
  // Upstream, after flushing every cache and retrying once on an upstream tp::OutOfMemoryError. `sized`: with
  // the block's allocated size (else `allocated` is 0).
  SizedAllocation allocate_with_retry(std::size_t bytes, std::size_t alignment, const AllocationTag& tag, bool sized);
  // What the allocator set aside for a live block of `bytes` at `ptr`, looked up (for an allocator that does not
  // promise a fixed_allocated_size).
  std::size_t footprint(const void* ptr, std::size_t bytes) const noexcept;
  void add_in_use(std::size_t allocated) noexcept;

  // Immutable after construction.
  const ThreadCacheOptions options_;
  const std::uint64_t id_;  // unique per adaptor for the process's life: keys the thread-local lookup
  const std::shared_ptr<detail::ThreadCacheRegistry> registry_;
  std::atomic<std::uint64_t> num_retries_{0};
  // Footprints of the blocks callers hold (allocated through this adaptor, not yet freed), and their peak.
  std::atomic<std::size_t> in_use_{0};
  std::atomic<std::size_t> peak_in_use_{0};
};

}  // namespace tp::memory

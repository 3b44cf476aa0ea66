// SPDX-License-Identifier: Apache-2.0
#pragma once
// StatisticsAdaptor: owns the caller-facing counters of a stack. It counts what callers asked for
// (bytes_requested and its peak, num_allocs, num_frees, largest_alloc) and every tp::OutOfMemoryError that
// passes through it on the way to the caller (num_ooms; the error is rethrown unchanged). With
// RequestCounts::upstream it counts only the errors and takes the request counters from an upstream that counts
// them exactly already (a BFC stack without a thread cache: MemoryStack), sparing each call its atomics. Everything that
// depends on rounding or on the source (bytes_in_use, bytes_reserved and their peaks, largest_free_block,
// num_retries, upstream_allocs/frees, bytes_limit) comes from upstream.stats(), since only the allocators
// below know it.
//
// Invariant (when no call is in flight): bytes_requested_ == sum of `bytes` of allocations served and not yet
// freed <= peak_bytes_requested_; num_frees <= num_allocs (each the sum over the shards).
// Thread safety: lock-free. bytes_requested_ is one atomic counter, changed by one atomic read-modify-write per
// call, so its peak is exact (raised by a compare-exchange only when exceeded). num_allocs, num_frees and
// largest_alloc need no single counter (a sum and a maximum of per-thread parts are exact): they live in
// per-thread shards, each owned by one running thread at a time (a process-wide shard index a thread takes at
// its first count and gives back at exit), which adds to its shard with a plain load and store, no locked
// instruction; threads beyond kShards share the last shard with atomic adds. stats() reads each counter
// exactly, though counters read while other threads allocate need not be from one instant.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tensorpool/memory/resource_adaptor.hpp"

namespace tp::memory {

// Where a StatisticsAdaptor's request counters (bytes_requested and its peak, num_allocs, num_frees,
// largest_alloc) come from.
enum class RequestCounts : std::uint8_t {
  own,       // counted here: right over any upstream
  upstream,  // the upstream's stats(), for an upstream that counts exactly the calls made through this adaptor
             // (an allocator such as BfcAllocator, directly or below layers that pass every call through, as
             // the tracking adaptor does; not a thread cache, which serves calls its allocator never sees)
};

class StatisticsAdaptor final : public ResourceAdaptor {
 public:
  // Shards for threads that hold a shard index, plus one that all other threads share.
  static constexpr std::size_t kShards = 64;

  explicit StatisticsAdaptor(std::unique_ptr<MemoryResource> upstream, std::string name = "statistics",
                             RequestCounts counts = RequestCounts::own);
  explicit StatisticsAdaptor(MemoryResource& upstream, std::string name = "statistics",
                             RequestCounts counts = RequestCounts::own);

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;

  // One thread's counts (one cache line, so threads never share a line they write).
  struct alignas(64) Shard {
    std::atomic<std::uint64_t> allocs{0};
    std::atomic<std::uint64_t> frees{0};
    std::atomic<std::size_t> largest_alloc{0};
  };
  // Add one allocation of `bytes`, or one free, to this thread's shard.
  void count_allocation(std::size_t bytes) noexcept;
  void count_free() noexcept;
  // A thread's first count (it takes a shard index), or one of a thread without an index (the shared shard):
  // one allocation of `allocated_bytes` (none when 0) and `frees` frees.
  [[gnu::noinline, gnu::cold]] void count_slowly(std::size_t allocated_bytes, std::uint64_t frees) noexcept;

  const RequestCounts counts_;  // with upstream, the members below but num_ooms_ stay 0
  std::atomic<std::size_t> bytes_requested_{0};
  std::atomic<std::size_t> peak_bytes_requested_{0};
  std::atomic<std::uint64_t> num_ooms_{0};
  std::array<Shard, kShards + 1> shards_{};
};

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#pragma once
// MemoryStack: one device's composed memory, built from a MemoryConfig by make_memory_stack():
//
//   statistics( tracking?( thread_cache?( allocator( source ) ) ) )
//     allocator = BfcAllocator     over the source as a MemoryResource (preallocate | grow, limit, GC, split)
//               | ExpandableArena  over the source as VirtualMemory  (limit; preallocate keeps freed pages)
//               | ShardedArena     config.arena_shards > 1 expandable arenas over it, one budget, a thread's
//                                  requests going to one of them (threads allocating at once take different locks)
//               | LimitingAdaptor  over the source itself            (system: every request goes to the source)
//     thread_cache = ThreadCacheAdaptor when config.thread_cache_bytes > 0 and the allocator is BFC (or
//               managed) with BfcSplit::exact, system or cuda_malloc_async; below tracking, so a cached block
//               is not a live allocation to the profiler. Not over BFC with BfcSplit::tensorflow (a cache learns
//               footprints there only under BFC's lock) nor over the expandable arena (the cache's locked pair
//               costs more than the arena's, and its kept blocks pin the arena's granules)
//     tracking  = TrackingAdaptor when config.tracking
//
// The stack is itself the MemoryResource callers use (named config.device); every tp::OutOfMemoryError
// leaving it names config.device in its report. The budget (limit_bytes()) is config.limit_bytes, or
// config.fraction x the source's capacity, or the whole capacity; see resolve_limit_bytes().
//
// Ownership: the stack owns its source(s) and every layer; the layers are destroyed top-down before the
// source. Thread-safe as its layers are (all of them are).

#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>

#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/thread_cache_adaptor.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"
#include "tensorpool/memory/virtual_memory.hpp"

namespace tp::memory {

class MemoryStack;

namespace detail {
// Shared by the make_memory_stack overloads: `virtual_memory` is owned_virtual_memory.get(), or points into
// `source` when one object is both.
std::unique_ptr<MemoryStack> build_memory_stack(const MemoryConfig& config, std::unique_ptr<MemoryResource> source,
                                                std::unique_ptr<VirtualMemory> owned_virtual_memory,
                                                VirtualMemory* virtual_memory,
                                                std::optional<std::size_t> source_capacity);
}  // namespace detail

class MemoryStack final : public MemoryResource {
 public:
  ~MemoryStack() override;

  // The stack itself: the resource tensors and executors allocate from.
  MemoryResource& resource() noexcept { return *this; }
  const MemoryConfig& config() const noexcept { return config_; }
  // The budget in bytes the allocator enforces.
  [[nodiscard]] std::size_t limit_bytes() const noexcept { return limit_bytes_; }
  // Live-allocation records; null when config().tracking is false.
  TrackingAdaptor* tracking() const noexcept { return tracking_; }
  // The per-thread caches of freed small blocks; null when config().thread_cache_bytes is 0 or the allocator is
  // BFC with BfcSplit::tensorflow or the expandable arena.
  ThreadCacheAdaptor* thread_cache() const noexcept { return thread_cache_; }
  // The allocator layer (BfcAllocator, ExpandableArena, or the LimitingAdaptor of `system`), for tests and
  // tools that inspect it (e.g. dynamic_cast to BfcAllocator for check_invariants()).
  MemoryResource& allocator() const noexcept { return *allocator_; }

  std::size_t max_alignment() const noexcept override { return max_alignment_; }
  std::size_t allocation_granularity() const noexcept override { return top_->allocation_granularity(); }
  std::optional<std::size_t> fixed_allocated_size(std::size_t bytes) const noexcept override {
    return top_->fixed_allocated_size(bytes);
  }

 private:
  friend std::unique_ptr<MemoryStack> detail::build_memory_stack(const MemoryConfig&, std::unique_ptr<MemoryResource>,
                                                                 std::unique_ptr<VirtualMemory>, VirtualMemory*,
                                                                 std::optional<std::size_t>);
  MemoryStack(const MemoryConfig& config, std::size_t limit_bytes, std::unique_ptr<MemoryResource> source,
              std::unique_ptr<VirtualMemory> owned_virtual_memory, VirtualMemory* virtual_memory);

  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  std::size_t do_trim() override;
  CompactionResult do_compact(Relocator& relocator) override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;
  std::size_t do_allocated_size(const void* ptr, std::size_t bytes) const noexcept override;

  // Immutable after construction. Declared source first so the layers (top_) are destroyed before it.
  const MemoryConfig config_;
  const std::size_t limit_bytes_;
  std::unique_ptr<MemoryResource> source_;               // null for `expandable` over a plain VirtualMemory
  std::unique_ptr<VirtualMemory> owned_virtual_memory_;  // null when unused or when source_ is it
  std::unique_ptr<MemoryResource> top_;                  // the statistics adaptor; owns the layers below
  MemoryResource* allocator_ = nullptr;                  // inside top_
  TrackingAdaptor* tracking_ = nullptr;                  // inside top_, or null
  ThreadCacheAdaptor* thread_cache_ = nullptr;           // inside top_, or null
  std::size_t max_alignment_ = 0;                        // top_'s, read once: every allocate checks it
};

// Builds a stack over separate sources, both owned: `source` serves bfc and system, `virtual_memory` serves
// expandable; the one the config's allocator does not use may be null. source_capacity bounds the budget
// (needed for a fraction, or when limit_bytes is unset); when absent, virtual_memory->capacity() is used.
// Throws tp::InvalidArgument for a config that fails validate(), a missing source for the chosen allocator,
// or a budget that cannot be derived or does not fit the capacity.
[[nodiscard]] std::unique_ptr<MemoryStack> make_memory_stack(const MemoryConfig& config,
                                                             std::unique_ptr<MemoryResource> source,
                                                             std::unique_ptr<VirtualMemory> virtual_memory = nullptr,
                                                             std::optional<std::size_t> source_capacity = std::nullopt);

// Builds a stack over one object that is both a MemoryResource and a VirtualMemory (SimDeviceMemory, a
// CUDA device): it serves every allocator kind, and its VirtualMemory::capacity() bounds the budget.
template <typename Device>
requires std::derived_from<Device, MemoryResource> && std::derived_from<Device, VirtualMemory>
    std::unique_ptr<MemoryStack> make_memory_stack(const MemoryConfig& config, std::unique_ptr<Device> device) {
  VirtualMemory* virtual_memory = device.get();
  const std::optional<std::size_t> capacity = device != nullptr ? virtual_memory->capacity() : std::nullopt;
  return detail::build_memory_stack(config, std::move(device), nullptr, virtual_memory, capacity);
}

// Host memory: HostResource for bfc/system, HostVirtualMemory for expandable. The host has no hard capacity,
// so the config must set limit_bytes, or fraction (of host_physical_memory_bytes()); tp::InvalidArgument
// otherwise.
[[nodiscard]] std::unique_ptr<MemoryStack> make_host_memory_stack(const MemoryConfig& config);

// A simulated device of `capacity_bytes` (SimDeviceMemory named config.device) under the configured stack;
// for the replay tool, benchmarks and tests.
[[nodiscard]] std::unique_ptr<MemoryStack> make_sim_device_memory_stack(const MemoryConfig& config,
                                                                        std::size_t capacity_bytes);

// Physical RAM of this machine (sysconf), in bytes; 0 when unknown.
[[nodiscard]] std::size_t host_physical_memory_bytes() noexcept;

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/memory_stack.hpp"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/bfc_allocator.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/host_resource.hpp"
#include "tensorpool/memory/host_virtual_memory.hpp"
#include "tensorpool/memory/limiting_adaptor.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/sharded_arena.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"
#include "tensorpool/memory/statistics_adaptor.hpp"
#include "tensorpool/memory/thread_cache_adaptor.hpp"

namespace tp::memory {
namespace {

static_assert(MemoryConfig::kMaxArenaShards == ShardedArena::kMaxShards);

std::unique_ptr<MemoryResource> make_allocator(const MemoryConfig& config, std::size_t limit_bytes,
                                               MemoryResource* source, VirtualMemory* virtual_memory) {
  switch (config.allocator) {
    // managed: BFC over cudaMallocManaged regions (the source a cuda device passes for it).
    case AllocatorKind::managed:
    case AllocatorKind::bfc: {
      BfcOptions options;
      options.limit_bytes = limit_bytes;
      options.growth = config.policy;
      options.garbage_collection = config.garbage_collection;
      options.split = config.bfc_split;
      options.split_threshold = config.split_threshold.value_or(MemoryConfig::kDefaultSplitThreshold);
      if (config.split_fraction.has_value()) {
        const double threshold = *config.split_fraction * static_cast<double>(limit_bytes);
        options.split_threshold = std::max<std::size_t>(kDefaultAlignment, static_cast<std::size_t>(threshold));
      }
      return std::make_unique<BfcAllocator>(*source, options);
    }
    case AllocatorKind::expandable: {
      if (limit_bytes < virtual_memory->granularity()) {
        TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", config.device, ": the budget of ",
                 format_bytes(limit_bytes), " is below one page granule of ", virtual_memory->name(), " (",
                 format_bytes(virtual_memory->granularity()),
                 "), so the expandable allocator could commit nothing;"
                 " raise limit_bytes or fraction, or use allocator = bfc");
      }
      ArenaOptions options;
      options.limit_bytes = limit_bytes;
      options.share_granules = config.share_granules;
      options.compact_before_growth = config.compact_before_growth;
      options.compaction_slack = config.compaction_slack;
      options.reuse_bytes = config.reuse_bytes;
      // preallocate: memory once obtained is kept (until trim), like BFC's single region; grow: freed pages
      // beyond the arena's release threshold go back to the source once unused for the decay window.
      if (config.policy == GrowthPolicy::preallocate) options.release_threshold = limit_bytes;
      if (config.release_decay_events.has_value()) options.release_decay_events = *config.release_decay_events;
      if (config.arena_shards > 1) {
        return std::make_unique<ShardedArena>(*virtual_memory, options, config.arena_shards);
      }
      return std::make_unique<ExpandableArena>(*virtual_memory, options);
    }
    // cuda_malloc_async: the driver's pool is the allocator (it caches freed blocks itself); the adaptor
    // enforces the budget, the pool's release threshold and maximum size are set from it by the source.
    case AllocatorKind::cuda_malloc_async:
    case AllocatorKind::system: return std::make_unique<LimitingAdaptor>(*source, limit_bytes);
  }
  TP_THROW(InvalidArgument, "memory", "unknown allocator kind ", static_cast<int>(config.allocator));
}

// A thread cache serves a pair without the allocator only when it knows a kept block's footprint without asking
// the allocator, and pays only when its pair costs less than the allocator's own. TensorFlow's BFC cannot say
// the footprint (a chunk below twice the request is handed out whole), so over it every kept free takes BFC's
// lock for a look-up and a cached pair costs more atomic operations than BFC's own pair. Over the expandable
// arena the cache's locked instructions cost more than the arena's pair saves on most traces, a bin that a new
// size claims hands its blocks back to the arena in one free (the p99), and the kept blocks stay allocated in
// the arena, pinning granules. Over either, the cache's held blocks raise the footprint. Such a stack has no
// cache (docs/memory.md, "Thread caches").
bool thread_cache_pays(const MemoryConfig& config) noexcept {
  switch (config.allocator) {
    case AllocatorKind::bfc:
    case AllocatorKind::managed: return config.bfc_split != BfcSplit::tensorflow;
    case AllocatorKind::expandable: return false;
    case AllocatorKind::cuda_malloc_async:
    case AllocatorKind::system: return true;
  }
  return false;
}

}  // namespace

namespace detail {

std::unique_ptr<MemoryStack> build_memory_stack(const MemoryConfig& config, std::unique_ptr<MemoryResource> source,
                                                std::unique_ptr<VirtualMemory> owned_virtual_memory,
                                                VirtualMemory* virtual_memory,
                                                std::optional<std::size_t> source_capacity) {
  config.validate();
  const bool needs_virtual_memory = config.allocator == AllocatorKind::expandable;
  if (needs_virtual_memory && virtual_memory == nullptr) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", config.device,
             ": allocator = expandable needs a VirtualMemory source (HostVirtualMemory, SimDeviceMemory); none was"
             " given. Pass one, or choose allocator = bfc or system");
  }
  if (!needs_virtual_memory && source == nullptr) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", config.device,
             ": allocator = ", to_string(config.allocator),
             " needs a MemoryResource source (HostResource, SimDeviceMemory); none was"
             " given. Pass one, or choose allocator = expandable with a VirtualMemory");
  }
  if (!source_capacity.has_value() && virtual_memory != nullptr) source_capacity = virtual_memory->capacity();
  const std::size_t limit_bytes = resolve_limit_bytes(config, source_capacity);
  return std::unique_ptr<MemoryStack>(
      new MemoryStack(config, limit_bytes, std::move(source), std::move(owned_virtual_memory), virtual_memory));
}

}  // namespace detail

MemoryStack::MemoryStack(const MemoryConfig& config, std::size_t limit_bytes, std::unique_ptr<MemoryResource> source,
                         std::unique_ptr<VirtualMemory> owned_virtual_memory, VirtualMemory* virtual_memory)
    : MemoryResource(config.device),
      config_(config),
      limit_bytes_(limit_bytes),
      source_(std::move(source)),
      owned_virtual_memory_(std::move(owned_virtual_memory)) {
  std::unique_ptr<MemoryResource> layer = make_allocator(config_, limit_bytes_, source_.get(), virtual_memory);
  allocator_ = layer.get();
  if (config_.thread_cache_bytes > 0 && thread_cache_pays(config_)) {
    ThreadCacheOptions options;
    options.max_bytes = config_.thread_cache_bytes;
    options.max_block_bytes = std::min(options.max_block_bytes, options.max_bytes);
    auto cache = std::make_unique<ThreadCacheAdaptor>(std::move(layer), options);
    thread_cache_ = cache.get();
    layer = std::move(cache);
  }
  if (config_.tracking) {
    auto tracking = std::make_unique<TrackingAdaptor>(std::move(layer));
    tracking_ = tracking.get();
    layer = std::move(tracking);
  }
  // BFC and the expandable arena count requests exactly (under their lock, which every call takes; the sharded
  // arena on its shared counters) when no thread cache serves calls they never see; the tracking adaptor passes
  // every call through. The statistics adaptor then spares each call its atomic read-modify-write.
  const bool allocator_counts = thread_cache_ == nullptr && (dynamic_cast<BfcAllocator*>(allocator_) != nullptr ||
                                                             dynamic_cast<ExpandableArena*>(allocator_) != nullptr ||
                                                             dynamic_cast<ShardedArena*>(allocator_) != nullptr);
  top_ = std::make_unique<StatisticsAdaptor>(std::move(layer), "statistics",
                                             allocator_counts ? RequestCounts::upstream : RequestCounts::own);
  max_alignment_ = top_->max_alignment();
}

MemoryStack::~MemoryStack() {
  top_.reset();  // layers first: they may still hold memory of the source
}

void* MemoryStack::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  try {
    return allocate_validated(*top_, bytes, alignment, tag);  // max_alignment() is top_'s: checked once
  } catch (OutOfMemoryError& error) {
    error.amend([this](OutOfMemoryReport& report) { report.device = config_.device; });
    throw;
  }
}

void MemoryStack::do_deallocate(void* ptr, std::size_t bytes) noexcept { deallocate_validated(*top_, ptr, bytes); }

std::size_t MemoryStack::do_trim() { return top_->trim(); }

CompactionResult MemoryStack::do_compact(Relocator& relocator) { return top_->compact(relocator); }

MemoryStats MemoryStack::do_stats() const {
  MemoryStats stats = top_->stats();
  if (!stats.bytes_limit.has_value()) stats.bytes_limit = limit_bytes_;
  return stats;
}

void MemoryStack::do_reset_peak() { top_->reset_peak(); }

std::size_t MemoryStack::do_allocated_size(const void* ptr, std::size_t bytes) const noexcept {
  return top_->allocated_size(ptr, bytes);
}

std::unique_ptr<MemoryStack> make_memory_stack(const MemoryConfig& config, std::unique_ptr<MemoryResource> source,
                                               std::unique_ptr<VirtualMemory> virtual_memory,
                                               std::optional<std::size_t> source_capacity) {
  VirtualMemory* borrowed = virtual_memory.get();
  return detail::build_memory_stack(config, std::move(source), std::move(virtual_memory), borrowed, source_capacity);
}

std::size_t host_physical_memory_bytes() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
}

std::unique_ptr<MemoryStack> make_host_memory_stack(const MemoryConfig& config) {
  config.validate();
  std::optional<std::size_t> capacity;
  if (config.fraction.has_value()) {
    const std::size_t physical = host_physical_memory_bytes();
    if (physical == 0) {
      TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", config.device, ": fraction = ", *config.fraction,
               " of host memory, but this system does not report its physical memory; set limit_bytes instead");
    }
    capacity = physical;
  } else if (!config.limit_bytes.has_value()) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", config.device,
             ": host memory has no fixed capacity, so the budget must be given; set limit_bytes (e.g. 8 GiB) or"
             " fraction of physical memory (e.g. 0.5 of ",
             format_bytes(host_physical_memory_bytes()), "), or TP_MEMORY_FRACTION");
  }
  if (config.allocator == AllocatorKind::expandable) {
    return make_memory_stack(config, nullptr, std::make_unique<HostVirtualMemory>(), capacity);
  }
  return make_memory_stack(config, std::make_unique<HostResource>(), nullptr, capacity);
}

std::unique_ptr<MemoryStack> make_sim_device_memory_stack(const MemoryConfig& config, std::size_t capacity_bytes) {
  config.validate();
  return make_memory_stack(config, std::make_unique<SimDeviceMemory>(capacity_bytes, config.device));
}

}  // namespace tp::memory

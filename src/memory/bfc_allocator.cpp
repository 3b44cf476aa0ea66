// SPDX-License-Identifier: Apache-2.0
// BfcAllocator: allocation, free, regions and growth. Inspection (regions(), check_invariants(), stats)
// lives in bfc_allocator_inspect.cpp. The algorithm and invariants are described in the header.

#include "tensorpool/memory/bfc_allocator.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <new>
#include <optional>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::memory {
namespace {

MemoryResource& checked(const std::unique_ptr<MemoryResource>& source) {
  if (source == nullptr) TP_THROW(InvalidArgument, "memory", "BfcAllocator: the source resource is null");
  return *source;
}

constexpr std::size_t round_down(std::size_t value, std::size_t multiple) noexcept { return value & ~(multiple - 1); }

// Twice `bytes`, capped at `cap` (no overflow).
constexpr std::size_t doubled(std::size_t bytes, std::size_t cap) noexcept { return bytes > cap / 2 ? cap : bytes * 2; }

}  // namespace

std::string_view to_string(BfcSplit split) noexcept {
  switch (split) {
    case BfcSplit::tensorflow: return "tensorflow";
    case BfcSplit::exact: return "exact";
  }
  return "unknown";
}

// ---- construction ------------------------------------------------------------------------------------

BfcAllocator::BfcAllocator(std::unique_ptr<MemoryResource> source, BfcOptions options, std::string name)
    : BfcAllocator(checked(source), options, std::move(name)) {
  owned_source_ = std::move(source);
}

BfcAllocator::BfcAllocator(MemoryResource& source, BfcOptions options, std::string name)
    : MemoryResource(std::move(name)),
      source_(source),
      options_(options),
      limit_(round_down(options.limit_bytes, kGranularity)),
      region_cap_(options.growth == GrowthPolicy::preallocate
                      ? limit_
                      : std::min(limit_, std::max(round_up(options.max_region_bytes, kGranularity),
                                                  round_up(options.initial_region_bytes, kGranularity)))),
      next_region_bytes_(0) {
  if (limit_ == 0) {
    TP_THROW(InvalidArgument, "memory", this->name(), ": limit_bytes = ", options.limit_bytes, " is below the ",
             kGranularity, "-byte granularity; give the allocator a positive limit");
  }
  if (options.initial_region_bytes == 0) {
    TP_THROW(InvalidArgument, "memory", this->name(), ": initial_region_bytes must be positive");
  }
  if (options.split != BfcSplit::tensorflow && options.split != BfcSplit::exact) {
    TP_THROW(InvalidArgument, "memory", this->name(), ": split = ", static_cast<int>(options.split),
             " is not a BfcSplit; use BfcSplit::tensorflow or BfcSplit::exact");
  }
  if (source.max_alignment() < kGranularity) {
    TP_THROW(InvalidArgument, "memory", this->name(), ": source '", source.name(), "' aligns to at most ",
             source.max_alignment(), " bytes; the BFC allocator needs ", kGranularity);
  }
  next_region_bytes_ = options.growth == GrowthPolicy::preallocate
                           ? limit_
                           : std::min(limit_, round_up(options.initial_region_bytes, kGranularity));
  bins_.reserve(kNumBins);
  for (int i = 0; i < kNumBins; ++i) bins_.emplace_back(BinOrder{&chunks_}, BinAllocator<ChunkHandle>{&bin_nodes_});
  stats_.bytes_limit = limit_;
}

BfcAllocator::~BfcAllocator() {
  if (stats_.bytes_in_use != 0) {
    TP_LOG(error, "memory", name(), ": destroyed with ", stats_.bytes_in_use,
           " bytes still in use; those pointers are now invalid");
  }
  for (const Region& region : regions_) source_.deallocate(region.base, region.size);
}

// ---- bins --------------------------------------------------------------------------------------------

void BfcAllocator::insert_free(ChunkHandle handle) {
  Chunk& chunk = chunks_[handle];
  const int bin = bin_for_size(chunk.size);
  chunk.in_bin = bins_[static_cast<std::size_t>(bin)].insert(handle).first;
  chunk.bin = static_cast<std::uint8_t>(bin);
  nonempty_bins_ |= BinMask{1} << bin;
}

void BfcAllocator::remove_free(ChunkHandle handle) noexcept {
  Chunk& chunk = chunks_[handle];
  Bin& bin = bins_[chunk.bin];
  bin.erase(chunk.in_bin);
  if (bin.empty()) nonempty_bins_ &= ~(BinMask{1} << chunk.bin);
  chunk.bin = kNoBin;
}

// TensorFlow's search, bin by bin from the request's own upwards, without visiting empty bins: in the request's
// bin the first chunk of at least `rounded` (lowest address among the smallest); in any later bin every chunk
// is larger than `rounded`, so its first.
BfcAllocator::ChunkHandle BfcAllocator::find_chunk(std::size_t rounded) const {
  const int bin = bin_for_size(rounded);
  if ((nonempty_bins_ >> bin & 1U) != 0) {
    const Bin& free_chunks = bins_[static_cast<std::size_t>(bin)];
    const auto it = free_chunks.lower_bound(SizeKey{rounded, 0});
    if (it != free_chunks.end()) return *it;
  }
  const BinMask later = nonempty_bins_ & ~((BinMask{2} << bin) - 1);
  if (later == 0) return kInvalidChunk;
  return *bins_[static_cast<std::size_t>(std::countr_zero(later))].begin();
}

std::size_t BfcAllocator::largest_free_chunk() const noexcept {
  for (int bin = kNumBins - 1; bin >= 0; --bin) {
    const Bin& free_chunks = bins_[static_cast<std::size_t>(bin)];
    if (!free_chunks.empty()) return chunks_[*free_chunks.rbegin()].size;
  }
  return 0;
}

void* BfcAllocator::BinNodes::allocate_from_arena(std::size_t bytes, std::size_t alignment) {
  if (node_bytes_ == 0) {  // the first request fixes the node size and alignment the free list serves
    node_bytes_ = bytes;
    node_align_ = std::max(alignment, alignof(FreeNode));
  }
  if (bytes != node_bytes_ || alignment > node_align_) return arena_.allocate(bytes, alignment);
  // Every node can hold the free-list link once given back.
  return arena_.allocate(std::max(bytes, sizeof(FreeNode)), node_align_);
}

// ---- chunk storage -----------------------------------------------------------------------------------

BfcAllocator::ChunkHandle BfcAllocator::new_chunk() {
  if (free_chunk_slots_ != kInvalidChunk) {
    const ChunkHandle handle = free_chunk_slots_;
    free_chunk_slots_ = chunks_[handle].next;
    chunks_[handle] = Chunk{};
    return handle;
  }
  chunks_.emplace_back();
  return static_cast<ChunkHandle>(chunks_.size() - 1);
}

void BfcAllocator::recycle_chunk(ChunkHandle handle) noexcept {
  chunks_[handle] = Chunk{};
  chunks_[handle].next = free_chunk_slots_;
  free_chunk_slots_ = handle;
}

// Cuts the first `size` bytes of free chunk `handle` (in its bin) off as a chunk in no bin, which it returns;
// the rest stays free. When the rest's smaller key still sorts after the element before `handle` in the same
// bin, the rest keeps `handle` and its bin element (no bin work) and the cut piece is a new chunk; otherwise the
// rest is a new chunk, inserted first, and `handle` leaves its bin as the cut piece. Strong guarantee: when the
// host cannot allocate the bookkeeping it throws std::bad_alloc with nothing changed.
BfcAllocator::ChunkHandle BfcAllocator::split_chunk(Region& region, ChunkHandle handle, std::size_t size) {
  const ChunkHandle other = new_chunk();  // may grow chunks_: take references only after
  Chunk& chunk = chunks_[handle];
  Chunk& piece = chunks_[other];
  const SizeKey rest_key{chunk.size - size, reinterpret_cast<std::uintptr_t>(chunk.ptr + size)};
  const Bin& bin = bins_[chunk.bin];
  if (bin_for_size(rest_key.size) == chunk.bin &&
      (chunk.in_bin == bin.begin() || BinOrder{&chunks_}(*std::prev(chunk.in_bin), rest_key))) {
    piece.ptr = chunk.ptr;
    piece.size = size;
    piece.prev = chunk.prev;
    piece.next = handle;
    if (chunk.prev != kInvalidChunk) chunks_[chunk.prev].next = other;
    chunk.prev = other;
    chunk.ptr += size;
    chunk.size = rest_key.size;
    region.handles[static_cast<std::size_t>(piece.ptr - region.base) / kGranularity] = other;
    region.handles[static_cast<std::size_t>(chunk.ptr - region.base) / kGranularity] = handle;
    return other;
  }
  piece.ptr = chunk.ptr + size;
  piece.size = rest_key.size;
  try {
    insert_free(other);
  } catch (const std::bad_alloc&) {
    recycle_chunk(other);
    throw;
  }
  remove_free(handle);
  piece.prev = handle;
  piece.next = chunk.next;
  if (chunk.next != kInvalidChunk) chunks_[chunk.next].prev = other;
  chunk.next = other;
  chunk.size = size;
  region.handles[static_cast<std::size_t>(piece.ptr - region.base) / kGranularity] = other;
  return handle;
}

// Absorbs `second` (the chunk right after `first`, in no bin) into `first`. `first` may be in its bin: its key
// only grows, and the caller puts it in place (regrow_free).
void BfcAllocator::merge_into(Region& region, ChunkHandle first, ChunkHandle second) noexcept {
  Chunk& absorbed = chunks_[second];
  Chunk& chunk = chunks_[first];
  chunk.size += absorbed.size;
  chunk.next = absorbed.next;
  if (absorbed.next != kInvalidChunk) chunks_[absorbed.next].prev = first;
  region.handles[static_cast<std::size_t>(absorbed.ptr - region.base) / kGranularity] = kInvalidChunk;
  recycle_chunk(second);
}

// Extends `second` (free, in its bin) down over `first`, the chunk right before it (free, in no bin): the
// merged chunk keeps `second`'s handle, so its bin element stays; `first`'s handle is recycled.
void BfcAllocator::extend_down(Region& region, ChunkHandle first, ChunkHandle second) noexcept {
  Chunk& absorbed = chunks_[first];
  Chunk& chunk = chunks_[second];
  region.handles[static_cast<std::size_t>(chunk.ptr - region.base) / kGranularity] = kInvalidChunk;
  region.handles[static_cast<std::size_t>(absorbed.ptr - region.base) / kGranularity] = second;
  chunk.ptr = absorbed.ptr;
  chunk.size += absorbed.size;
  chunk.prev = absorbed.prev;
  if (absorbed.prev != kInvalidChunk) chunks_[absorbed.prev].next = second;
  recycle_chunk(first);
}

// ---- regions -----------------------------------------------------------------------------------------

BfcAllocator::Region* BfcAllocator::region_for(const void* ptr) noexcept {
  return const_cast<Region*>(std::as_const(*this).region_for(ptr));
}

const BfcAllocator::Region* BfcAllocator::region_for(const void* ptr) const noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (regions_.size() == 1) {  // preallocate: the whole limit is one region
    const Region& only = regions_.front();
    return address - reinterpret_cast<std::uintptr_t>(only.base) < only.size ? &only : nullptr;
  }
  // First region whose base is above ptr; the candidate is the one before it.
  const auto it = std::upper_bound(regions_.begin(), regions_.end(), address, [](std::uintptr_t a, const Region& r) {
    return a < reinterpret_cast<std::uintptr_t>(r.base);
  });
  if (it == regions_.begin()) return nullptr;
  const Region& region = *(it - 1);
  const auto base = reinterpret_cast<std::uintptr_t>(region.base);
  return address - base < region.size ? &region : nullptr;
}

char* BfcAllocator::obtain_from_source(std::size_t bytes) noexcept {
  try {
    return static_cast<char*>(source_.allocate(bytes, kGranularity));
  } catch (const std::bad_alloc&) {  // tp::OutOfMemoryError included
    return nullptr;
  } catch (const Error& error) {  // e.g. a pinned source whose mlock limit is reached: say so in the OOM
    try {
      source_refusal_ = error.what();
    } catch (const std::bad_alloc&) {  // the OOM report is still raised, only without this detail
    }
    return nullptr;
  }
}

// Obtains a region big enough for `rounded`: TF's Extend. False when the limit or the source refuses.
bool BfcAllocator::extend(std::size_t rounded) {
  source_refusal_.clear();
  const std::size_t available = limit_ - stats_.bytes_reserved;
  if (rounded > available) return false;
  // A request larger than the next region takes the next region size doubled until it fits (TF).
  std::size_t size = next_region_bytes_;
  while (size < rounded) size = doubled(size, limit_);
  const bool increased = size != next_region_bytes_;
  size = std::min(size, available);
  char* base = obtain_from_source(size);
  while (base == nullptr && size > rounded) {  // back off x0.9 while the region still holds the request
    size = std::max(round_down(size - size / 10, kGranularity), rounded);
    base = obtain_from_source(size);
  }
  if (base == nullptr || !add_region(base, size)) return false;
  // Doubling stops at max_region_bytes so that a grown footprint overshoots live data by at most one region.
  next_region_bytes_ = std::min(increased ? size : doubled(next_region_bytes_, limit_), region_cap_);
  return true;
}

// Takes ownership of [base, base + size) as one free chunk. On a host bad_alloc for the bookkeeping the
// memory goes back to the source and nothing changes.
bool BfcAllocator::add_region(char* base, std::size_t size) {
  std::vector<ChunkHandle> handles;
  ChunkHandle handle = kInvalidChunk;
  try {
    handles.assign(size / kGranularity, kInvalidChunk);
    regions_.reserve(regions_.size() + 1);
    handle = new_chunk();
  } catch (const std::bad_alloc&) {
    source_.deallocate(base, size);
    return false;
  }
  chunks_[handle].ptr = base;
  chunks_[handle].size = size;
  handles[0] = handle;
  try {
    insert_free(handle);
  } catch (const std::bad_alloc&) {
    recycle_chunk(handle);
    source_.deallocate(base, size);
    return false;
  }
  const auto position = std::upper_bound(regions_.begin(), regions_.end(), base, [](char* b, const Region& r) {
    return reinterpret_cast<std::uintptr_t>(b) < reinterpret_cast<std::uintptr_t>(r.base);
  });
  regions_.insert(position, Region{base, size, std::move(handles)});  // capacity reserved: cannot throw
  stats_.bytes_reserved += size;
  ++stats_.upstream_allocs;
  stats_.update_peaks();
  return true;
}

bool BfcAllocator::is_wholly_free(const Region& region) const noexcept {
  const Chunk& first = chunks_[region.handles[0]];
  return !first.in_use && first.size == region.size;
}

std::size_t BfcAllocator::release_free_regions() {
  std::size_t released = 0;
  auto keep = regions_.begin();
  for (auto it = regions_.begin(); it != regions_.end(); ++it) {
    if (!is_wholly_free(*it)) {
      if (keep != it) *keep = std::move(*it);
      ++keep;
      continue;
    }
    const ChunkHandle handle = it->handles[0];
    remove_free(handle);
    recycle_chunk(handle);
    source_.deallocate(it->base, it->size);
    released += it->size;
    ++stats_.upstream_frees;
  }
  regions_.erase(keep, regions_.end());
  stats_.bytes_reserved -= released;
  return released;
}

bool BfcAllocator::collect_garbage(std::size_t rounded) {
  std::size_t freeable = 0;
  for (const Region& region : regions_) {
    if (is_wholly_free(region)) freeable += region.size;
  }
  // Freeing helps only if the limit, with those bytes back, leaves room for the request.
  if (freeable == 0 || rounded > limit_ - stats_.bytes_reserved + freeable) return false;
  release_free_regions();
  return true;
}

// ---- allocate / deallocate ---------------------------------------------------------------------------

void* BfcAllocator::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  return do_allocate_sized(bytes, alignment, tag).ptr;
}

MemoryResource::SizedAllocation BfcAllocator::do_allocate_sized(std::size_t bytes,
                                                                std::size_t /*alignment: <= 256, always honoured*/,
                                                                const AllocationTag& tag) {
  const std::size_t rounded = round_up(bytes, kGranularity);
  std::lock_guard lock(mutex_);
  ChunkHandle handle = find_chunk(rounded);
  if (handle == kInvalidChunk && extend(rounded)) handle = find_chunk(rounded);
  if (handle == kInvalidChunk && options_.garbage_collection && collect_garbage(rounded) && extend(rounded)) {
    handle = find_chunk(rounded);
    if (handle != kInvalidChunk) ++stats_.num_retries;
  }
  if (handle == kInvalidChunk) throw_out_of_memory(bytes, rounded, tag);
  return use_chunk(handle, rounded, bytes);
}

MemoryResource::SizedAllocation BfcAllocator::use_chunk(ChunkHandle handle, std::size_t rounded,
                                                        std::size_t requested) {
  const std::size_t size = chunks_[handle].size;
  // Sizes are multiples of kGranularity, so any leftover is a valid chunk; tensorflow keeps small leftovers.
  const bool split = size > rounded && (options_.split == BfcSplit::exact || size >= 2 * rounded ||
                                        size - rounded >= options_.split_threshold);
  ChunkHandle taken = handle;
  bool whole = !split;
  if (split) {
    try {
      taken = split_chunk(*region_for(chunks_[handle].ptr), handle, rounded);
    } catch (const std::bad_alloc&) {
      // No host memory for the split's bookkeeping. tensorflow hands the chunk out whole (correct, if
      // wasteful); exact promises the rounded size (fixed_allocated_size), so the request fails, nothing changed.
      if (options_.split == BfcSplit::exact) throw;
      whole = true;
    }
  }
  if (whole) remove_free(handle);
  Chunk& chunk = chunks_[taken];
  chunk.in_use = true;
  chunk.requested = requested;
  stats_.record_allocation(requested, chunk.size, 0);
  return SizedAllocation{chunk.ptr, chunk.size};
}

std::optional<std::size_t> BfcAllocator::fixed_allocated_size(std::size_t bytes) const noexcept {
  if (options_.split == BfcSplit::exact) return round_up(bytes, kGranularity);
  return std::nullopt;
}

void BfcAllocator::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  free_chunk(ptr, bytes, nullptr);
}

void BfcAllocator::do_deallocate_releasing(void* ptr, std::size_t bytes, std::atomic<std::size_t>& in_use) noexcept {
  std::lock_guard lock(mutex_);
  free_chunk(ptr, bytes, &in_use);
}

void BfcAllocator::free_chunk(void* ptr, std::size_t bytes, std::atomic<std::size_t>* in_use) noexcept {
  Region* region = region_for(ptr);
  const ChunkHandle handle = chunk_for(region, ptr, bytes);
  Chunk& chunk = chunks_[handle];
  // The chunk's size is its footprint (at least `bytes` rounded up, as chunk_for checked the request); taken
  // off under the lock, before the chunk can be handed out again.
  if (in_use != nullptr) in_use->fetch_sub(chunk.size, std::memory_order_relaxed);
  stats_.record_free(chunk.requested, chunk.size, 0);
  chunk.in_use = false;
  chunk.requested = 0;
  const ChunkHandle next = chunk.next;
  const ChunkHandle prev = chunk.prev;
  const bool next_free = next != kInvalidChunk && !chunks_[next].in_use;
  // A free neighbour already in a bin takes the freed bytes and keeps its element there when its larger key
  // still sorts before its successor's: prev (keeping its address), else next (starting lower).
  if (prev != kInvalidChunk && !chunks_[prev].in_use) {
    if (next_free) {
      remove_free(next);
      merge_into(*region, handle, next);
    }
    merge_into(*region, prev, handle);
    regrow_free(prev);
  } else if (next_free) {
    extend_down(*region, handle, next);
    regrow_free(next);
  } else {
    try {
      insert_free(handle);
    } catch (const std::bad_alloc&) {  // no memory for a bin node: nothing sane is left to do
      abort_bad_free(ptr, bytes, "out of host memory while returning the chunk to its bin");
    }
  }
}

// `handle` (free, in its bin) grew: its key (size, address) only rose, so it can have passed only later
// elements of its bin, or left the bin's size range. Re-inserted only then.
void BfcAllocator::regrow_free(ChunkHandle handle) noexcept {
  const Chunk& chunk = chunks_[handle];
  if (bin_for_size(chunk.size) == chunk.bin) {
    const auto after = std::next(chunk.in_bin);
    if (after == bins_[chunk.bin].end() || BinOrder{&chunks_}(handle, *after)) return;
  }
  remove_free(handle);  // by position: no key comparison, so the stale order of this element is harmless
  try {
    insert_free(handle);  // reuses the node remove_free just gave back to bin_nodes_
  } catch (const std::bad_alloc&) {
    abort_bad_free(chunks_[handle].ptr, 0, "out of host memory while returning the chunk to its bin");
  }
}

std::size_t BfcAllocator::do_allocated_size(const void* ptr, std::size_t bytes) const noexcept {
  std::lock_guard lock(mutex_);
  const Region* region = region_for(ptr);
  if (region == nullptr) return bytes;
  const auto offset = static_cast<std::size_t>(static_cast<const char*>(ptr) - region->base);
  if (offset % kGranularity != 0) return bytes;
  const ChunkHandle handle = region->handles[offset / kGranularity];
  return handle != kInvalidChunk && chunks_[handle].in_use ? chunks_[handle].size : bytes;
}

BfcAllocator::ChunkHandle BfcAllocator::chunk_for(Region* region, void* ptr, std::size_t bytes) const noexcept {
  if (region == nullptr) abort_bad_free(ptr, bytes, "the pointer was not allocated by this allocator");
  const auto offset = static_cast<std::size_t>(static_cast<char*>(ptr) - region->base);
  if (offset % kGranularity != 0) abort_bad_free(ptr, bytes, "the pointer points inside an allocation");
  const ChunkHandle handle = region->handles[offset / kGranularity];
  if (handle == kInvalidChunk || !chunks_[handle].in_use) {
    abort_bad_free(ptr, bytes, "the pointer is not allocated (double free?)");
  }
  if (chunks_[handle].requested != bytes) {
    char why[128];
    std::snprintf(why, sizeof why, "it was allocated with %zu bytes, not %zu", chunks_[handle].requested, bytes);
    abort_bad_free(ptr, bytes, why);
  }
  return handle;
}

void BfcAllocator::abort_bad_free(const void* ptr, std::size_t bytes, const char* why) const noexcept {
  // Printed whatever the level, and formatted without allocating: the allocator's state is not trusted.
  char line[512];
  std::snprintf(line, sizeof line, "fatal: %s: deallocate(%p, %zu): %s; aborting (memory corruption)", name().c_str(),
                ptr, bytes, why);
  log::write_always(log::Level::error, "memory", line);
  std::abort();
}

void BfcAllocator::throw_out_of_memory(std::size_t bytes, std::size_t rounded, const AllocationTag& tag) {
  ++stats_.num_ooms;
  auto report =
      OutOfMemoryReport::for_request(name(), bytes, rounded, tag, limit_, stats_.bytes_in_use, stats_.bytes_reserved);
  report.largest_free_block = largest_free_chunk();
  report.detail = detail::concat("BFC: ", regions_.size(), " region(s) from '", source_.name(), "', ",
                                 options_.growth == GrowthPolicy::grow ? "grow" : "preallocate",
                                 ", garbage collection ", options_.garbage_collection ? "on" : "off");
  if (!source_refusal_.empty()) report.detail += "; the source refused with: " + source_refusal_;
  throw OutOfMemoryError(std::move(report));
}

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
// BfcAllocator: read-only views (stats, snapshots, invariant checks), trim and reset_peak.

#include <sstream>

#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/bfc_allocator.hpp"

namespace tp::memory {

std::size_t BfcAllocator::do_trim() {
  std::lock_guard lock(mutex_);
  return release_free_regions();
}

MemoryStats BfcAllocator::do_stats() const {
  std::lock_guard lock(mutex_);
  MemoryStats stats = stats_;
  stats.largest_free_block = largest_free_chunk();
  return stats;
}

void BfcAllocator::do_reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
}

std::vector<BfcAllocator::RegionInfo> BfcAllocator::regions() const {
  std::lock_guard lock(mutex_);
  std::vector<RegionInfo> snapshot;
  snapshot.reserve(regions_.size());
  for (const Region& region : regions_) {
    RegionInfo info{reinterpret_cast<std::uintptr_t>(region.base), region.size, {}};
    for (ChunkHandle handle = region.handles[0]; handle != kInvalidChunk; handle = chunks_[handle].next) {
      const Chunk& chunk = chunks_[handle];
      info.chunks.push_back(
          ChunkInfo{static_cast<std::size_t>(chunk.ptr - region.base), chunk.size, chunk.requested, chunk.in_use});
    }
    snapshot.push_back(std::move(info));
  }
  return snapshot;
}

namespace {

template <typename... Parts>
std::string violation(const Parts&... parts) {
  return detail::concat(parts...);
}

}  // namespace

// Walks one region's chunk list; adds its free-chunk count, in-use and requested bytes and chunk count.
std::string BfcAllocator::check_region(const Region& region, std::size_t& free_chunks, std::size_t& in_use,
                                       std::size_t& requested, std::size_t& chunk_count) const {
  const auto base = reinterpret_cast<std::uintptr_t>(region.base);
  if (region.size == 0 || region.size % kGranularity != 0 || base % kGranularity != 0) {
    return violation("region at ", base, " has size ", region.size, " or base not a multiple of ", kGranularity);
  }
  if (region.handles.size() != region.size / kGranularity) return violation("region at ", base, ": handle map size");
  std::size_t offset = 0;
  std::size_t walked = 0;
  ChunkHandle previous = kInvalidChunk;
  for (ChunkHandle handle = region.handles[0]; handle != kInvalidChunk; handle = chunks_[handle].next) {
    if (handle >= chunks_.size() || ++walked > region.handles.size()) {
      return violation("region at ", base, ": chunk list is corrupt (bad handle or cycle)");
    }
    const Chunk& chunk = chunks_[handle];
    const auto where = [&](const auto&... what) {  // built only on failure: this loop is hot in tests
      return violation("region at ", base, ", chunk at offset ", offset, ": ", what...);
    };
    if (chunk.ptr != region.base + offset) return where("gap or overlap (chunk starts elsewhere)");
    if (chunk.prev != previous) return where("prev link does not name the previous chunk");
    if (chunk.size == 0 || chunk.size % kGranularity != 0) return where("size ", chunk.size);
    if (chunk.size > region.size - offset) return where("runs past the region end");
    if (region.handles[offset / kGranularity] != handle) return where("handle map does not point to it");
    if (chunk.in_use) {
      if (chunk.bin != kNoBin) return where("in use but marked as binned");
      if (chunk.requested == 0 || round_up(chunk.requested, kGranularity) > chunk.size) {
        return where("requested ", chunk.requested, " does not fit size ", chunk.size);
      }
      in_use += chunk.size;
      requested += chunk.requested;
    } else {
      if (previous != kInvalidChunk && !chunks_[previous].in_use) return where("two adjacent free chunks");
      if (chunk.bin != bin_for_size(chunk.size)) return where("free chunk in the wrong bin");
      if (bins_[chunk.bin].count(handle) == 0) return where("free chunk missing from its bin");
      if (*chunk.in_bin != handle) return where("free chunk's bin position names another chunk");
      ++free_chunks;
    }
    offset += chunk.size;
    previous = handle;
  }
  if (offset != region.size) return violation("region at ", base, ": chunks cover ", offset, " of ", region.size);
  // A plain loop over the raw array: this scan dominates invariant checks in unoptimized builds.
  std::size_t starts = 0;
  const ChunkHandle* slot = region.handles.data();
  for (const ChunkHandle* end = slot + region.handles.size(); slot != end; ++slot) starts += *slot != kInvalidChunk;
  if (starts != walked) return violation("region at ", base, ": stale handle map entries");
  chunk_count += walked;
  return {};
}

std::string BfcAllocator::check_bins(std::size_t free_chunks) const {
  std::size_t binned = 0;
  const BinOrder before{&chunks_};
  for (int bin = 0; bin < kNumBins; ++bin) {
    const Bin& members = bins_[static_cast<std::size_t>(bin)];
    if (((nonempty_bins_ >> bin & 1U) != 0) == members.empty()) {
      return violation("bin ", bin, " is ", members.empty() ? "empty" : "not empty", " but its bit says otherwise");
    }
    ChunkHandle previous = kInvalidChunk;
    for (auto it = members.begin(); it != members.end(); ++it) {
      const ChunkHandle handle = *it;
      const Chunk& chunk = chunks_[handle];
      if (chunk.in_use || chunk.bin != bin)
        return violation("bin ", bin, " holds a chunk that is in use or not its own");
      if (bin_for_size(chunk.size) != bin) {
        return violation("bin ", bin, " holds a free chunk of ", chunk.size, " bytes, which belongs in bin ",
                         bin_for_size(chunk.size));
      }
      if (chunk.in_bin != it) return violation("a free chunk of bin ", bin, " does not know its element there");
      // The search takes a bin's first fitting element: the order must be (size, address) at every step.
      if (previous != kInvalidChunk && !before(previous, handle)) {
        return violation("bin ", bin, " is out of (size, address) order at a chunk of ", chunk.size, " bytes");
      }
      previous = handle;
      ++binned;
    }
  }
  if (binned != free_chunks) return violation("bins hold ", binned, " chunks but regions have ", free_chunks, " free");
  return {};
}

std::string BfcAllocator::check_invariants() const {
  std::lock_guard lock(mutex_);
  std::size_t free_chunks = 0;
  std::size_t in_use = 0;
  std::size_t requested = 0;
  std::size_t chunk_count = 0;
  std::size_t reserved = 0;
  std::uintptr_t previous_end = 0;
  for (const Region& region : regions_) {
    const auto base = reinterpret_cast<std::uintptr_t>(region.base);
    if (base < previous_end) return violation("regions are unsorted or overlap at ", base);
    previous_end = base + region.size;
    reserved += region.size;
    std::string error = check_region(region, free_chunks, in_use, requested, chunk_count);
    if (!error.empty()) return error;
  }
  if (std::string error = check_bins(free_chunks); !error.empty()) return error;
  if (reserved != stats_.bytes_reserved) return violation("bytes_reserved ", stats_.bytes_reserved, " != ", reserved);
  if (reserved > limit_) return violation("reserved ", reserved, " exceeds the limit ", limit_);
  if (in_use != stats_.bytes_in_use) return violation("bytes_in_use ", stats_.bytes_in_use, " != ", in_use);
  if (requested != stats_.bytes_requested) {
    return violation("bytes_requested ", stats_.bytes_requested, " != ", requested);
  }
  std::size_t unused_slots = 0;
  for (ChunkHandle handle = free_chunk_slots_; handle != kInvalidChunk; handle = chunks_[handle].next) {
    if (++unused_slots > chunks_.size()) return violation("chunk free list has a cycle");
  }
  if (chunk_count + unused_slots != chunks_.size()) {
    return violation(chunks_.size(), " chunk slots but ", chunk_count, " in regions and ", unused_slots, " unused");
  }
  return {};
}

}  // namespace tp::memory

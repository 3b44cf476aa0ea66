// SPDX-License-Identifier: Apache-2.0
#pragma once
// BfcAllocator: TensorFlow's best-fit-with-coalescing allocator, sub-allocating regions obtained from a
// source MemoryResource.
//
// Algorithm. Requests are rounded up to a multiple of kGranularity (256 bytes), which is also the largest
// alignment served (region bases come from the source aligned to 256 and every chunk starts at a multiple
// of 256 from its region's base). Memory is obtained from the source in regions; each region is cut into
// chunks. A request takes the smallest free chunk that fits (best fit, ties broken by lowest address). With
// BfcSplit::tensorflow (the default, TensorFlow's rule) the chunk is split when it is at least twice the
// rounded request, or when the leftover is at least options.split_threshold, otherwise it is handed out whole;
// with BfcSplit::exact it is split whenever anything is left over (the leftover is then at least one
// 256-byte granule, the smallest chunk), so an in-use chunk is exactly the rounded request, which
// fixed_allocated_size() promises. When the host cannot allocate the split's bookkeeping, tensorflow hands the
// chunk out whole and exact fails the request with std::bad_alloc (the chunk stays free). On free, the
// chunk merges with free address neighbours (coalescing). When no free chunk fits, a new region is obtained:
// with GrowthPolicy::grow its size starts at initial_region_bytes and doubles with each new region up to
// max_region_bytes (at least the rounded request, never past limit_bytes - reserved); with
// GrowthPolicy::preallocate the first region is the whole limit, obtained at the first allocate (limit_bytes
// is rounded down to 256 throughout). When the source refuses a region,
// the size backs off by x0.9 while it still holds the request. When growing fails and garbage_collection
// is on, wholly free regions are returned to the source and growing is tried once more; after that the
// request fails with tp::OutOfMemoryError and the allocator stays usable.
//
// Data structures and their invariants (check_invariants() verifies all of them):
//   - chunks_: storage for every Chunk, addressed by ChunkHandle (an index). Unused slots form a free list
//     through Chunk::next starting at free_chunk_slots_, so splitting and merging allocate nothing once the
//     vector has grown.
//   - regions_: sorted by base address, disjoint. The chunks of a region, linked by prev/next in address
//     order, cover it without gaps or overlap; no two adjacent chunks are both free. Region::handles maps
//     each 256-byte slot to the chunk starting there (kInvalidChunk where no chunk starts), which is how
//     deallocate finds a chunk from a pointer in O(log regions). Its cost is host memory: 4 bytes per 256
//     reserved (1/64 of the reserved bytes; a 16 GiB region costs 256 MiB of host RAM), as in TensorFlow.
//   - bins_: bin i holds exactly the free chunks whose size is in [256 << i, 256 << (i + 1)) (the last bin
//     is unbounded), ordered by (size, address). Every free chunk is in exactly one bin, and its in_bin is its
//     element there; no in-use chunk is in a bin. Bit i of nonempty_bins_ is set exactly when bin i is not
//     empty (the search skips empty bins with it). The set nodes come from bin_nodes_'s free list.
//   - stats_: bytes_in_use == sum of in-use chunk sizes, bytes_requested == sum of their requested sizes,
//     bytes_reserved == sum of region sizes <= limit_bytes.
//
// Stats notes: largest_free_block is the largest free chunk (computed on demand from the top non-empty
// bin): any request whose rounded size is at most that is served without touching the source.
// largest_alloc is the largest request as asked (before rounding). num_retries counts requests served only
// after garbage collection returned free regions to the source.
//
// deallocate of a pointer this allocator did not hand out (or already took back), or with a `bytes` other
// than the one passed to allocate, is memory corruption: it prints a message naming the allocator and the
// pointer to stderr and calls std::abort().
//
// Thread safety: every public member is thread-safe; one mutex guards all mutable state.

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/memory/allocator_mutex.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/memory_stats.hpp"

namespace tp::memory {

enum class GrowthPolicy { preallocate, grow };

// When a free chunk larger than a request is split. tensorflow: TensorFlow's rule, bit for bit (split at twice
// the request or at split_threshold of leftover; a chunk below that is handed out whole, its slack in use until
// the free). exact: split off any leftover, so no chunk holds more than the rounded request.
enum class BfcSplit : std::uint8_t { tensorflow, exact };

// "tensorflow", "exact".
std::string_view to_string(BfcSplit split) noexcept;

struct BfcOptions {
  std::size_t limit_bytes = 0;  // hard wall on reserved bytes (sum of regions); > 0
  GrowthPolicy growth = GrowthPolicy::grow;
  bool garbage_collection = true;                        // on failure, free wholly-free regions and retry
  BfcSplit split = BfcSplit::tensorflow;                 // when a free chunk larger than a request is cut
  std::size_t split_threshold = std::size_t{128} << 20;  // tensorflow: split also when leftover >= this
  std::size_t initial_region_bytes = std::size_t{2} << 20;
  // grow: regions stop doubling at this size (a larger request still gets a region that holds it), so the
  // reserved footprint exceeds the live peak by at most about one region instead of up to 2x.
  std::size_t max_region_bytes = std::size_t{64} << 20;
};

class BfcAllocator final : public MemoryResource {
 public:
  static constexpr std::size_t kGranularity = 256;
  static constexpr int kNumBins = 21;

  // Owns the source. Throws tp::InvalidArgument for a null source, limit_bytes < kGranularity,
  // initial_region_bytes == 0, a split that is not a BfcSplit, or a source whose max_alignment() is below
  // kGranularity.
  BfcAllocator(std::unique_ptr<MemoryResource> source, BfcOptions options, std::string name = "bfc");
  // Borrows the source, which must outlive this allocator.
  BfcAllocator(MemoryResource& source, BfcOptions options, std::string name = "bfc");
  // Returns every region to the source (live allocations, if any, are reported on stderr and become invalid).
  ~BfcAllocator() override;

  // Snapshot types, for tests, the profiler's segment map and out-of-memory reports.
  struct ChunkInfo {
    std::size_t offset = 0;     // from the region base
    std::size_t size = 0;       // chunk size (a multiple of 256)
    std::size_t requested = 0;  // bytes asked by the caller; 0 when free
    bool in_use = false;
  };
  struct RegionInfo {
    std::uintptr_t base = 0;
    std::size_t size = 0;
    std::vector<ChunkInfo> chunks;  // in address order
  };
  // Regions in address order with their chunks.
  [[nodiscard]] std::vector<RegionInfo> regions() const;
  // Empty string when all invariants above hold, else a description of the first violation. O(reserved / 256).
  [[nodiscard]] std::string check_invariants() const;

  const BfcOptions& options() const noexcept { return options_; }
  std::size_t max_alignment() const noexcept override { return kGranularity; }
  std::size_t allocation_granularity() const noexcept override { return kGranularity; }
  // BfcSplit::exact: the request rounded up to kGranularity (every in-use chunk is exactly that), so a caller
  // needs no look-up under the lock; tensorflow: std::nullopt (a chunk below twice the request stays whole).
  std::optional<std::size_t> fixed_allocated_size(std::size_t bytes) const noexcept override;

  // Bin that holds a free chunk of `bytes` (>= kGranularity): floor(log2(bytes / 256)), capped at 20.
  [[nodiscard]] static int bin_for_size(std::size_t bytes) noexcept {
    const int bin = static_cast<int>(std::bit_width(bytes / kGranularity)) - 1;
    return std::clamp(bin, 0, kNumBins - 1);
  }

 private:
  using ChunkHandle = std::uint32_t;
  static constexpr ChunkHandle kInvalidChunk = ~ChunkHandle{0};
  static constexpr std::uint8_t kNoBin = 0xff;

  struct Chunk;
  // Orders a bin by (size, address). Transparent so a bin can be searched by SizeKey.
  struct SizeKey {
    std::size_t size;
    std::uintptr_t address;
  };
  struct BinOrder {
    using is_transparent = void;
    const std::vector<Chunk>* chunks;
    bool operator()(ChunkHandle a, ChunkHandle b) const noexcept;
    bool operator()(ChunkHandle a, const SizeKey& b) const noexcept;
    bool operator()(const SizeKey& a, ChunkHandle b) const noexcept;
  };
  // Where the bins' set nodes come from: a free list of nodes over a monotonic arena, since every node a bin
  // allocates has one size. A warm insert pops a node and an erase pushes it back, inline (a few instructions,
  // against a general-purpose pool's search); the memory goes back to the host with the allocator. A request of
  // another size or alignment (none in practice) is served by the arena and never reused.
  class BinNodes {
   public:
    void* allocate(std::size_t bytes, std::size_t alignment) {
      if (bytes == node_bytes_ && alignment <= node_align_ && free_ != nullptr) [[likely]] {
        FreeNode* node = free_;
        free_ = node->next;
        return node;
      }
      return allocate_from_arena(bytes, alignment);
    }
    void deallocate(void* ptr, std::size_t bytes, std::size_t alignment) noexcept {
      if (bytes == node_bytes_ && alignment <= node_align_) free_ = ::new (ptr) FreeNode{free_};
      // else: not a node; the arena keeps it until it is destroyed.
    }

   private:
    struct FreeNode {
      FreeNode* next;
    };
    void* allocate_from_arena(std::size_t bytes, std::size_t alignment);

    std::pmr::monotonic_buffer_resource arena_;
    FreeNode* free_ = nullptr;    // nodes of node_bytes_ given back, most recent first
    std::size_t node_bytes_ = 0;  // the size of the first node allocated (0 before)
    std::size_t node_align_ = 0;  // and the alignment every node of that size gets
  };
  // The bins' allocator: BinNodes, inline.
  template <class T>
  struct BinAllocator {
    using value_type = T;
    BinNodes* nodes;
    explicit BinAllocator(BinNodes* bin_nodes) noexcept : nodes(bin_nodes) {}
    template <class U>
    BinAllocator(const BinAllocator<U>& other) noexcept : nodes(other.nodes) {}  // NOLINT(google-explicit-constructor)
    T* allocate(std::size_t n) { return static_cast<T*>(nodes->allocate(n * sizeof(T), alignof(T))); }
    void deallocate(T* ptr, std::size_t n) noexcept { nodes->deallocate(ptr, n * sizeof(T), alignof(T)); }
    template <class U>
    bool operator==(const BinAllocator<U>& other) const noexcept {
      return nodes == other.nodes;
    }
  };
  using Bin = std::set<ChunkHandle, BinOrder, BinAllocator<ChunkHandle>>;
  using BinMask = std::uint32_t;
  static_assert(kNumBins <= 31, "a BinMask has a bit per bin and one to spare");
  struct Chunk {
    char* ptr = nullptr;
    std::size_t size = 0;              // multiple of kGranularity
    std::size_t requested = 0;         // caller's bytes while in use
    ChunkHandle prev = kInvalidChunk;  // address neighbours within the region (next: free list when unused)
    ChunkHandle next = kInvalidChunk;
    std::uint8_t bin = kNoBin;  // bin index while free, kNoBin while in use or unused
    bool in_use = false;
    Bin::iterator in_bin{};  // while free: its element of bins_[bin], so leaving the bin needs no search
  };
  struct Region {
    char* base = nullptr;
    std::size_t size = 0;
    std::vector<ChunkHandle> handles;  // one per 256-byte slot: the chunk starting there, or kInvalidChunk
  };

  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  SizedAllocation do_allocate_sized(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  void do_deallocate_releasing(void* ptr, std::size_t bytes, std::atomic<std::size_t>& in_use) noexcept override;
  std::size_t do_trim() override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;
  std::size_t do_allocated_size(const void* ptr, std::size_t bytes) const noexcept override;

  // All below require mutex_ held.
  ChunkHandle find_chunk(std::size_t rounded) const;
  // Frees the in-use chunk handed out as `ptr` with `bytes` (aborting on anything else), first taking its size
  // off *in_use when given.
  void free_chunk(void* ptr, std::size_t bytes, std::atomic<std::size_t>* in_use) noexcept;
  SizedAllocation use_chunk(ChunkHandle handle, std::size_t rounded, std::size_t requested);
  bool extend(std::size_t rounded);
  char* obtain_from_source(std::size_t bytes) noexcept;  // nullptr when the source refuses
  bool add_region(char* base, std::size_t size);
  bool is_wholly_free(const Region& region) const noexcept;
  bool collect_garbage(std::size_t rounded);  // frees wholly free regions if that can make room
  std::size_t release_free_regions();
  ChunkHandle split_chunk(Region& region, ChunkHandle handle, std::size_t size);
  void merge_into(Region& region, ChunkHandle first, ChunkHandle second) noexcept;
  void extend_down(Region& region, ChunkHandle first, ChunkHandle second) noexcept;
  void regrow_free(ChunkHandle handle) noexcept;
  ChunkHandle new_chunk();
  void recycle_chunk(ChunkHandle handle) noexcept;
  void insert_free(ChunkHandle handle);
  void remove_free(ChunkHandle handle) noexcept;
  Region* region_for(const void* ptr) noexcept;
  const Region* region_for(const void* ptr) const noexcept;
  // The in-use chunk handed out as `ptr` with `bytes`; prints and aborts on anything else.
  ChunkHandle chunk_for(Region* region, void* ptr, std::size_t bytes) const noexcept;
  [[noreturn]] void abort_bad_free(const void* ptr, std::size_t bytes, const char* why) const noexcept;
  std::size_t largest_free_chunk() const noexcept;
  [[noreturn]] void throw_out_of_memory(std::size_t bytes, std::size_t rounded, const AllocationTag& tag);
  std::string check_region(const Region& region, std::size_t& free_chunks, std::size_t& in_use, std::size_t& requested,
                           std::size_t& chunk_count) const;
  std::string check_bins(std::size_t free_chunks) const;

  // Immutable after construction.
  std::unique_ptr<MemoryResource> owned_source_;  // null when the source is borrowed
  MemoryResource& source_;
  const BfcOptions options_;
  const std::size_t limit_;       // options_.limit_bytes rounded down to kGranularity
  const std::size_t region_cap_;  // grow: regions double up to this; preallocate: limit_

  // Guarded by mutex_: everything below (chunks, free-chunk list, regions, bins, growth size, stats).
  mutable AllocatorMutex mutex_;
  std::vector<Chunk> chunks_;
  ChunkHandle free_chunk_slots_ = kInvalidChunk;
  std::vector<Region> regions_;
  BinNodes bin_nodes_;  // recycles bin set nodes: no malloc per op when warm
  std::vector<Bin> bins_;
  BinMask nonempty_bins_ = 0;      // bit i set exactly when bins_[i] is not empty
  std::size_t next_region_bytes_;  // TF's curr_region_allocation_bytes_
  std::string source_refusal_;     // the source's error (not a plain OOM) during the last extend, for reports
  MemoryStats stats_;
};

// Inline, so the bins' tree walks compare without a call.
inline bool BfcAllocator::BinOrder::operator()(ChunkHandle a, ChunkHandle b) const noexcept {
  const Chunk& x = (*chunks)[a];
  const Chunk& y = (*chunks)[b];
  if (x.size != y.size) return x.size < y.size;
  return reinterpret_cast<std::uintptr_t>(x.ptr) < reinterpret_cast<std::uintptr_t>(y.ptr);
}

inline bool BfcAllocator::BinOrder::operator()(ChunkHandle a, const SizeKey& b) const noexcept {
  const Chunk& x = (*chunks)[a];
  if (x.size != b.size) return x.size < b.size;
  return reinterpret_cast<std::uintptr_t>(x.ptr) < b.address;
}

inline bool BfcAllocator::BinOrder::operator()(const SizeKey& a, ChunkHandle b) const noexcept {
  const Chunk& y = (*chunks)[b];
  if (a.size != y.size) return a.size < y.size;
  return a.address < reinterpret_cast<std::uintptr_t>(y.ptr);
}

}  // namespace tp::memory

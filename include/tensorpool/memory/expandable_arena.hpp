// SPDX-License-Identifier: Apache-2.0
#pragma once
// ExpandableArena: a sub-allocator over one large virtual range whose physical backing follows the live
// blocks granule by granule (after PyTorch's expandable segments). A growing request never fails for lack
// of a contiguous physical hole: the virtual range is large and only touched granules cost memory.
//
// Algorithm.
//   - One range of options.reserve_bytes is reserved from the VirtualMemory at construction and released
//     in the destructor. It is cut into blocks, multiples of 256 bytes (kDefaultAlignment), that cover
//     [0, extent) without gaps; the extent grows at the end when no free block holds a request and shrinks
//     when the last block is freed (the tail block is always in use).
//   - Free index: free blocks are binned by size (exact below 16 KiB, then 64 bins per power of two, bin_of),
//     each bin an intrusive treap ordered by (size, offset) with priorities hashed from the node index; a
//     two-level bit mask of the non-empty bins finds the next bin. Priorities are distinct, so a bin's tree is
//     unique; blocks are inserted and erased top-down (split and merge, no rotations). No allocation (the links
//     live in the block nodes); a block whose key changes without passing its neighbour in the bin stays in
//     place. The bins are fine so that a bin's tree holds few blocks: a level of a tree costs a dependent load and
//     a branch that seldom predicts, a bin only a root and a bit. In-use blocks are found by offset through an
//     open-addressing hash table of their offsets (buckets of four entries, a cache line each, linear probing by
//     bucket, at most a quarter of the entries used): its size follows the in-use blocks, not the extent, so a
//     free touches a cache line wherever the blocks lie (a table per 256 bytes of the extent would be megabytes,
//     one cache and TLB miss per call when blocks spread over it), and a look-up compares a bucket's four entries
//     at once instead of branching on each probe.
//   - Granule-aware best fit: free blocks are indexed by (size, offset). A request weighs the kFitCandidates smallest
//     free blocks that can take it (lowest address first on equal sizes; of at most kMaxFitExamined, or all when
//     growing would pass the middle of the range), each at both ends, and the end of the extent (or the next granule
//     boundary after it, when the extent's last granule cannot take the piece); it takes the placement that needs the
//     fewest "fresh" physical granules (ones no in-use block uses, so the peak can only rise by them), then the fewest
//     new ones, then the smaller block, the low end and a free block before the extent's end. The search stops at a
//     placement no later one can beat (one that reaches min_fresh_granules). The remainder stays a
//     free block. A freed block merges with free neighbours. Random frees among N live blocks keep ~N/2 holes open,
//     which no placement closes; physical sharing is what keeps them from pinning memory.
//   - Physical granules shared between virtual granules (ArenaOptions::share_granules). A virtual granule
//     (VirtualMemory::granularity(), 2 MiB) touched by an in-use block is mapped to a physical granule
//     (VirtualMemory::create_physical: a memfd slice on the host, cuMemCreate on CUDA). One physical granule may be
//     mapped at several virtual granules at once, as long as the parts of it their in-use blocks touch do not overlap:
//     so the tail of one block and the head of a block elsewhere in the range live in one physical granule, and a free
//     hole inside a virtual granule costs no memory when another granule's blocks fill the same physical bytes.
//     Occupancy is tracked in 64 chunks per granule (32 KiB for 2 MiB): each virtual granule has a mask of the chunks
//     its in-use blocks touch, each physical granule the union of the masks of the virtual granules mapped to it. A
//     placement is valid when every granule it touches either keeps its mapping (the new piece overlaps no chunk
//     another virtual granule uses in that physical granule) or has no in-use block and can be remapped; pieces that
//     need a physical granule take, in order, a partly used one whose free chunks at the bottom or top hold them
//     (tightest first), a cached one, a new one. Without sharing the cached one is, of the kVictimCandidates least
//     recently freed, the one mapped at the fewest virtual granules (the oldest on a tie), never one that a later
//     granule of the same block still maps and claims: a block placed where blocks were freed last finds its
//     granules still mapped and makes no mapping call, and a remap leaves stale the fewest mappings a later block
//     would find. Physical committed bytes count, not virtual ones: committed_bytes() = granularity x physical
//     granules backed.
//   - A physical granule with no in-use block through any of its mappings stays committed and mapped
//     ("cached") on a least-recently-freed list, so an allocate/free cycle makes no system call; a virtual
//     granule keeps its mapping after its last block goes (a later block there reuses it when it does not
//     overlap the physical granule's other users).
//   - Release policy. (1) Caching never raises the peak: a new physical granule is created only when no
//     cached one is left, so peak committed == the peak of physical granules in use, whatever the cache
//     holds. (2) Decay: every allocate and deallocate call is one tick of an event clock, and a granule going
//     on the cached list is stamped with it. Up to options.release_threshold bytes stay cached however long;
//     beyond it, a cached granule is decommitted (unmapping every mapping, then VirtualMemory::release_physical,
//     which punches the memfd hole) once it has stayed cached for options.release_decay_events ticks, the
//     least recently freed first, checked at the end of every allocate and deallocate. So what a step frees and
//     the next step takes again stays committed (no system call per step), and what is not used again within
//     the window goes back gradually; the cache holds at most the granules used within the window (plus the
//     threshold). release_decay_events = 0 decommits beyond the threshold at once. (3) trim() decommits every
//     cached physical granule, however recent.
//   - Committed bytes never exceed options.limit_bytes. When a new physical granule would cross the limit,
//     or the source refuses it (its capacity), every cached granule is decommitted, the request is placed
//     wherever it needs the fewest new granules, and it is retried once before tp::OutOfMemoryError (num_retries
//     counts the requests the retry served, as BFC does; a request that still fails counts in num_ooms only).
//   - Exceptions. allocate is strongly exception-safe: whatever the bookkeeping of a placement needs (a spare
//     block node, in-use slots, granule tables and scratch room) is reserved before the first mapping,
//     nothing after it allocates, and a placement that fails part-way gives back what it took and releases
//     the physical granules it created. deallocate and trim never allocate.
//
// Invariants (check_invariants() verifies them; the tests call it after every random operation):
//   blocks cover [0, extent) without gaps, in address order; no two adjacent blocks are both free; the
//   free index holds exactly the free blocks, each in the bin of its size, its links are consistent, its
//   walk over all bins is strictly increasing in (size, offset), each node's priority is >= its children's
//   and the bin mask names the non-empty bins; the slot of each in-use block's offset names it and every
//   other slot is empty; each virtual granule's user count and chunk mask equal the count and the union of
//   the chunks of the in-use blocks touching it (no chunks without sharing); a virtual granule with users is
//   mapped; a mapped virtual granule is on the mapping list of a committed physical granule and of no other;
//   the masks of a physical granule's mappings are pairwise disjoint and their union is its mask; its user
//   count is the number of its mappings with users; it is cached (on the list, which is consistent) iff it
//   has no users (the list's stamps do not decrease from its oldest end and none is past the event clock), and
//   on the partial lists of its free bottom and top chunk counts iff sharing is on, it has
//   users and a free end; uncommitted physical granules have no mappings and are on the free list;
//   committed_bytes == granularity x committed physical granules <= limit_bytes; the in-use and requested
//   sums equal the sums over in-use blocks.
//
// Exact-size reuse (ArenaOptions::reuse_bytes, expandable_arena_reuse.cpp): a freed block of at most
// reuse_max_block bytes is kept whole ("kept": free to callers, out of the in-use index and the statistics' in-use
// bytes, but not merged, not in the free index, and still holding its granules), on a list per free-index bin and
// a ring in the order kept, while the kept blocks hold at most reuse_bytes; the oldest go back (released as any
// free) beyond it. A request of exactly a kept block's rounded size takes the most recently kept one of its bin
// (of the first few looked at) without a search, so a loop that frees and allocates the same sizes (a training
// step's activations, a decoder's per-token buffers) skips the placement, carve, merge and granule bookkeeping.
// Kept blocks never make the arena commit: a request whose best placement would commit new granules first gives
// every kept block back and is placed again, and so does one whose placement takes more fresh (cached) granules
// than any placement of its size must (min_fresh_granules) when it asks no more than the kept bytes (which could
// then hold it); so do compaction, trim() and the out-of-memory retry. The layout still differs from an arena
// without reuse, and with it the peak, by a granule or two on the bench traces. Where requests seldom repeat a
// kept size (fewer than one in kReuseMinHitShare of a round of kReuseRound keeps), keeping pauses for kReusePause
// frees, its blocks given back, so random sizes pay for neither the keeping nor the flushes. Off (0) by default in
// ArenaOptions; MemoryConfig turns it on for the expandable stacks.
//
// Compaction (compact(relocator), expandable_arena_compaction.cpp), called by the blocks' owner at a point
// where nothing uses them (a step boundary), typically after an allocation failed with free memory in pieces:
// in-use blocks are taken from the highest address down (in up to kCompactionPasses passes, while a pass moves
// something); each block the relocator lets move goes to the
// lowest free block below it where the move takes no more physical granules than it gives back (every
// granule the new place touches already has users, except those it needs fresh while as many of the block's
// old granules lose their last user, and fresh ones must be within the limit). A block placed at the same
// offset within a granule as before (the free block allows it) keeps its whole granules: their physical
// granules are mapped at the new place, not copied; the rest is copied (VirtualMemory::copy). The relocator
// is told each move; then every cached granule is decommitted. Only without granule sharing (ran = false
// otherwise): there a written granule's physical memory may show through other mappings.
//
// Reclaim before growing (expandable_arena_growth.cpp): when the placement a request gets must create physical
// granules (no cached one is left) and, for the hook, take committed bytes past their peak (stats'
// peak_bytes_reserved, which reset_peak() lowers to the current reservation), the growth hook runs first (the
// lock released; a stack's thread caches give their blocks back) and the request is placed again; if it still
// must grow, and compact_before_growth is on with a relocator set, and growing would leave more free inside the
// reservation than the slack allows, the arena compacts, in two steps, and places it again:
//   1. Evacuation (compact_evacuating): granules are emptied, the cheapest first (the fewest bytes in the
//      blocks touching them; none costing more than kMaxEvacuationGranules granules), by moving each of their
//      blocks into a free block where it takes no fresh granule (the smallest such, not in the granule emptied),
//      until the request needs no new granule. A granule that took a moved block is not emptied in the same
//      compaction, so no block moves twice. The copies are the moved blocks' bytes.
//   2. Sliding (compact_sliding), when evacuation could not free enough and the free bytes inside grew by a
//      granule past what the last slide left (so a slide that could not help is not repeated on every request):
//      from the highest free block with enough free bytes above it to bring the reservation back to half the
//      slack after the growth, each movable in-use block trades places with the free block below it (one
//      overlapping copy), so the free blocks gather and leave at the extent's end; fresh granules the slides
//      take come from those earlier slides gave back, so it never commits more than a slide frees. It copies
//      every block above its start.
// A request served from what the arena holds never reaches this path: one branch on new_granules.
//
// Stats: bytes_reserved = committed bytes, bytes_in_use = sum of in-use block sizes (256-rounded),
// upstream_allocs/frees = physical granules created/released, largest_free_block = the longest run of mapped
// bytes no in-use block covers, in a free block or past the extent (fragmentation.hpp). deallocate of a
// pointer not handed out, or with other `bytes` than allocate got, prints the arena's name and the pointer
// to stderr and aborts.
// Thread-safe: one mutex guards everything below it.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensorpool/memory/allocator_mutex.hpp"
#include "tensorpool/memory/compaction.hpp"
#include "tensorpool/memory/growth_pressure.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/virtual_memory.hpp"

namespace tp::memory {

struct ArenaOptions {
  // Hard wall on committed bytes. Must be > 0.
  std::size_t limit_bytes = 0;
  // Virtual range reserved once; 0 = 8 x limit_bytes (at least 256 MiB, at most 64 TiB; halved while the OS
  // refuses). Address space is cheap: holes in it cost no memory.
  std::size_t reserve_bytes = 0;
  // Wholly free granules kept committed (cached) after a free; beyond it the least recently freed are
  // decommitted. 64 MiB: large enough that steady allocate/free cycles of blocks up to 64 MiB make no system
  // call (latency stays in BFC's league), and harmless to the peak, since cached granules are given back
  // before committed bytes rise above their high-water mark. Lower it to hand idle memory back sooner.
  std::size_t release_threshold = std::size_t{64} << 20;
  // Cached granules beyond release_threshold are decommitted only after staying unused for this many
  // allocator events (allocate and deallocate calls reaching the arena), like jemalloc's dirty_decay_ms but
  // counted in events, so it is deterministic and costs no clock read. 65,536: many steps of a training loop
  // (a step frees what the next allocates again, which then makes no system call), while memory a phase no
  // longer uses goes back within the window once the workload moves on. An idle arena keeps its cache until
  // trim(), the next events or an allocation the cache must make room for. 0 = decommit beyond
  // release_threshold at once.
  std::uint64_t release_decay_events = std::uint64_t{1} << 16;
  // Lets one physical granule back several virtual granules whose in-use blocks touch disjoint chunks of it:
  // less memory under fragmenting patterns (random sizes), at the cost of placement work on every request
  // and remapping system calls (docs/memory.md has the trade-off), hence opt-in. Off: each virtual granule
  // with users has a physical granule of its own.
  bool share_granules = false;
  // Reclaim before growing (growth_pressure.hpp): with a Relocator registered (set_relocator), a request that
  // would commit new physical granules first compacts the arena when growing would leave more than
  // compaction_slack x the in-use bytes, plus one granule, free inside the reservation: it evacuates granules,
  // then, when that frees too few, slides blocks (only once the holes grew by a granule past what the last slide
  // left: a slide that could not help is not repeated on every request). Off by default: only the blocks' owner
  // knows whether they may move. Not with share_granules (compaction does not run there).
  bool compact_before_growth = false;
  // In [0, 1]: 0 compacts before any growth that would leave more than a granule free inside.
  double compaction_slack = 0.02;
  // Exact-size reuse (above): the most bytes freed blocks kept whole for a request of their size may hold; 0 = off.
  std::size_t reuse_bytes = 0;
  // Larger freed blocks are never kept.
  std::size_t reuse_max_block = std::size_t{4} << 20;
};

// What exact-size reuse did (ExpandableArena::reuse_stats()).
struct ReuseStats {
  std::size_t kept_blocks = 0;  // kept now
  std::size_t kept_bytes = 0;
  std::uint64_t keeps = 0;    // frees kept so far
  std::uint64_t hits = 0;     // requests served by a kept block
  std::uint64_t flushes = 0;  // times every kept block was given back (a placement, compaction, trim, a retry)
  std::uint64_t pauses = 0;   // rounds after which keeping paused for too few hits
  bool paused = false;
};

class ExpandableArena final : public MemoryResource {
 public:
  // Owns `memory`.
  ExpandableArena(std::unique_ptr<VirtualMemory> memory, ArenaOptions options, std::string name = "expandable");
  // Borrows `memory`, which must outlive the arena.
  ExpandableArena(VirtualMemory& memory, ArenaOptions options, std::string name = "expandable");
  // Decommits and unreserves everything (outstanding blocks become invalid).
  ~ExpandableArena() override;

  struct BlockInfo {
    std::size_t offset = 0;     // from the base of the reserved range
    std::size_t size = 0;       // multiple of 256
    std::size_t requested = 0;  // 0 for free blocks
    bool in_use = false;
  };
  // Address-ordered, covering [0, extent).
  [[nodiscard]] std::vector<BlockInfo> blocks() const;
  [[nodiscard]] std::size_t committed_bytes() const;
  [[nodiscard]] std::size_t reserved_range_bytes() const noexcept { return range_bytes_; }
  // Bytes per granule (the source's VirtualMemory::granularity()); fixed for life.
  [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
  // Address of offset 0 of the reserved range (blocks()' offsets are relative to it); fixed for life.
  std::uintptr_t base_address() const noexcept { return reinterpret_cast<std::uintptr_t>(base_); }
  const ArenaOptions& options() const noexcept { return options_; }
  // "" when every invariant holds, otherwise a description of the first violation.
  [[nodiscard]] std::string check_invariants() const;
  // compact(relocator) (MemoryResource) moves in-use blocks the relocator lets move to lower free blocks and
  // gives back the physical granules that no block uses any more (see "Compaction" above). The caller
  // guarantees that nothing reads or writes the blocks meanwhile. An allocation that fails after it (before any
  // allocation succeeds) carries the result in its OutOfMemoryReport. Throws std::bad_alloc only before
  // anything moved.
  // Reclaim before growing (growth_pressure.hpp). The hook runs, without the arena's lock, before a request
  // commits new physical granules; the relocator is the owner compaction before growth may move blocks of
  // (ArenaOptions::compact_before_growth): its calls come from inside allocate, at points where nothing may
  // use a block it lets move. Null / empty: none. Set them while no allocation is in flight.
  void set_growth_hook(GrowthHook hook);
  void set_relocator(Relocator* relocator);
  [[nodiscard]] GrowthPressureStats growth_pressure_stats() const;
  [[nodiscard]] ReuseStats reuse_stats() const;
  // Exact-size reuse pauses after a round of kReuseRound keeps with fewer than one hit per kReuseMinHitShare
  // keeps, for kReusePause frees.
  static constexpr std::uint64_t kReuseRound = 4096;
  static constexpr std::uint64_t kReuseMinHitShare = 8;
  static constexpr std::uint64_t kReusePause = std::uint64_t{1} << 16;

  static constexpr std::size_t kBlockAlignment = kDefaultAlignment;

  // Every block is its request rounded up to kBlockAlignment: a remainder is always a block of its own.
  std::optional<std::size_t> fixed_allocated_size(std::size_t bytes) const noexcept override {
    return round_up(bytes, kBlockAlignment);
  }

 private:
  struct Block {
    std::size_t offset = 0;
    std::size_t size = 0;
    std::size_t requested = 0;   // 0 when free
    std::uint32_t prev = kNone;  // address-order neighbours
    std::uint32_t next = kNone;
    std::uint32_t left = kNone;  // free-index links, while free
    std::uint32_t right = kNone;
    std::uint32_t parent = kNone;
    std::uint32_t priority = 0;  // treap priority: a hash of the node's index, fixed for the node's life
    std::uint16_t bin = 0;       // free-index bin, while free
    bool in_use = false;         // also while kept: its granules stay taken
    bool kept = false;           // freed, kept whole for exact-size reuse; left/right link its bin's kept list
  };
  struct Granule {                       // a virtual granule of the reserved range
    std::uint64_t mask = 0;              // chunks touched by in-use blocks
    std::uint32_t users = 0;             // in-use blocks touching it
    std::uint32_t physical = kNone;      // physical granule mapped here, or kNone (reserved only)
    std::uint32_t prev_mapping = kNone;  // the physical granule's other mappings
    std::uint32_t next_mapping = kNone;
  };
  struct Physical {
    VirtualMemory::PhysicalHandle handle = 0;
    std::uint64_t mask = 0;               // union of its mappings' masks
    std::uint32_t users = 0;              // mappings with users
    std::uint32_t first_mapping = kNone;  // virtual granules mapped to it
    std::uint32_t older = kNone;          // LRU links, while cached
    std::uint32_t newer = kNone;
    std::array<std::uint32_t, 2> prev_partial{kNone, kNone};  // partial lists: [0] by free bottom chunks,
    std::array<std::uint32_t, 2> next_partial{kNone, kNone};  // [1] by free top chunks
    std::array<std::uint8_t, 2> partial_list{0, 0};           // free chunks at that end; 0 = not listed
    std::uint64_t cached_since = 0;                           // events_ when it went on the LRU list
    bool committed = false;
    bool cached = false;  // committed with no users: on the LRU list
  };
  // What a piece of a block needs in one virtual granule.
  enum class Need : std::uint8_t { keep, share, claim, fresh, invalid };
  struct Choice {
    Need need = Need::fresh;
    std::uint32_t physical = kNone;  // keep/share/claim: the physical granule
  };
  struct Placement {
    std::uint32_t block = kNone;     // free block to carve, or kNone to grow the extent
    std::size_t offset = 0;          // where the new block starts (past extent_ leaves a free block before)
    std::size_t new_granules = 0;    // physical granules it must create
    std::size_t fresh_granules = 0;  // physical granules it takes that no in-use block uses (cached or new)
    bool valid = false;              // false when the reserved range has no room or a piece cannot fit
    // A valid placement beats an invalid one, and an invalid one beats nothing (it has no counts); between
    // valid ones, fewer fresh granules, then fewer commits.
    bool better_than(const Placement& other) const noexcept {
      if (valid != other.valid) return valid;
      if (!valid) return false;
      if (fresh_granules != other.fresh_granules) return fresh_granules < other.fresh_granules;
      return new_granules < other.new_granules;
    }
  };
  static constexpr std::uint32_t kNone = 0xffffffffu;
  // A bucket of the in-use index, one cache line: an entry lives in its home bucket or, when that is full, in the
  // first later bucket with room (wrapping); `passed` counts the entries stored past this bucket that way, so a
  // look-up stops at the first bucket none passed and an erase needs no tombstone.
  static constexpr std::size_t kSlotsPerBucket = 4;
  struct alignas(64) SlotBucket {
    std::array<std::size_t, kSlotsPerBucket> offsets{~std::size_t{0}, ~std::size_t{0}, ~std::size_t{0},
                                                     ~std::size_t{0}};  // an in-use block's offset, or kEmptySlot
    std::array<std::uint32_t, kSlotsPerBucket> indices{kNone, kNone, kNone, kNone};
    std::uint32_t passed = 0;  // entries whose home bucket is earlier, stored in a later bucket
  };
  static constexpr std::size_t kChunks = 64;  // occupancy chunks per granule: one bit each
  static constexpr std::uint64_t kAllChunks = ~std::uint64_t{0};
  // best_fit weighs this many of the smallest free blocks that hold a request (and the extent's end).
  static constexpr std::size_t kFitCandidates = 4;
  // ...skipping free blocks no placement fits (their granules' chunks are lent), up to this many in all.
  static constexpr std::size_t kMaxFitExamined = 32;
  // Free-index bins (bin_of): one per size below kSubBins x 256 bytes, then kSubBins per power of two of the
  // size; the last takes all from about 2 TiB.
  static constexpr std::size_t kSubBinBits = 6;
  static constexpr std::size_t kSubBins = std::size_t{1} << kSubBinBits;
  static constexpr std::size_t kBinWords = 28;  // 64-bit words of the non-empty bin mask
  static_assert(kBinWords < 64, "nonempty_words_ has a bit per word of the bin mask, and one to spare");
  static constexpr std::size_t kBins = 64 * kBinWords;
  static constexpr std::array<std::uint32_t, kChunks> filled_partials() noexcept {
    std::array<std::uint32_t, kChunks> heads{};
    heads.fill(kNone);
    return heads;
  }
  static constexpr std::array<std::uint32_t, kBins> filled_roots() noexcept {
    std::array<std::uint32_t, kBins> roots{};
    roots.fill(kNone);
    return roots;
  }

  ExpandableArena(VirtualMemory* memory, std::unique_ptr<VirtualMemory> owned, ArenaOptions options, std::string name);

  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  std::size_t do_trim() override;
  CompactionResult do_compact(Relocator& relocator) override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;
  std::size_t do_allocated_size(const void* ptr, std::size_t bytes) const noexcept override;

  // All below: the caller holds mutex_.
  Placement best_fit(std::size_t size) const;
  Placement best_fit_exclusive(std::size_t size) const;  // best_fit without sharing
  Placement fewest_commits(std::size_t size) const;
  Placement place(std::uint32_t block, std::size_t offset, std::size_t size) const;
  // The better end of a free block; the low end alone when it takes at most `bound` fresh granules.
  Placement place_in(std::uint32_t block, std::size_t size, std::size_t bound) const;
  Placement place_at_end(std::size_t size) const;
  // Maps and takes every granule the block [placement.offset, + size) touches; false (with nothing taken)
  // when the limit or the source refuses a new physical granule.
  bool acquire_for(const Placement& placement, std::size_t size);
  // Reserves what carve(placement, size) and acquire_for need (a spare node; slots when it grows the extent;
  // granule tables), so that nothing after the first mapping allocates. May throw; changes nothing observable.
  void prepare_carve(const Placement& placement, std::size_t size);
  // Address-order list: link a node before/after a block, unlink one (and recycle its node).
  void link_before(std::uint32_t index, std::uint32_t at) noexcept;
  void link_after(std::uint32_t index, std::uint32_t at) noexcept;
  void unlink(std::uint32_t index) noexcept;
  // Cuts `size` bytes at placement.offset out of its free block (or the extent's end); returns the node.
  std::uint32_t carve(const Placement& placement, std::size_t size);
  // Frees an in-use block, merging it with free neighbours (or cutting it off at the tail).
  void release_block(std::uint32_t index);
  // Exact-size reuse (expandable_arena_reuse.cpp). keep_block: keeps a freed block (out of the in-use index and
  // the stats; the caller checked that keeping is on, not paused, and the block small enough); the oldest kept go
  // back beyond reuse_bytes. take_kept: a kept block of exactly `size` bytes, unkept, or kNone. flush_kept: gives
  // every kept block back; whether there was one.
  void keep_block(std::uint32_t index) noexcept;
  std::uint32_t take_kept(std::size_t size) noexcept {
    std::uint32_t index = kept_heads_[bin_of(size)];
    for (std::size_t looked = 0; looked < kKeptLookups && index != kNone; ++looked, index = nodes_[index].right) {
      if (nodes_[index].size == size) {
        unlist_kept(index);  // its ring entry is dropped when the ring reaches it
        ++reuse_.hits;
        ++round_hits_;
        return index;
      }
    }
    return kNone;
  }
  bool flush_kept() noexcept;
  void unlist_kept(std::uint32_t index) noexcept {
    Block& block = nodes_[index];
    if (block.left != kNone) {
      nodes_[block.left].right = block.right;
    } else {
      kept_heads_[bin_of(block.size)] = block.right;
    }
    if (block.right != kNone) nodes_[block.right].left = block.left;
    block.left = kNone;
    block.right = kNone;
    block.kept = false;
    kept_bytes_ -= block.size;
    --kept_blocks_;
  }
  void release_kept(std::uint32_t index) noexcept;
  static constexpr std::size_t kKeptLookups = 4;  // kept blocks of a bin take_kept compares with the request
  static constexpr std::size_t kKeptRing = 4096;  // most entries of the keep order (so most kept blocks)

  std::size_t decommit_cached(std::size_t keep_bytes) noexcept;
  // The decay: decommits the least recently freed cached granules beyond release_threshold that have stayed
  // cached for release_decay_events events. O(1) when none has.
  void decay_cached() noexcept {
    const std::size_t keep = options_.release_threshold >> granule_shift_;
    if (cached_count_ > keep && events_ - physicals_[lru_oldest_].cached_since >= options_.release_decay_events) {
      decommit_idle(keep);
    }
  }
  void decommit_idle(std::size_t keep) noexcept;
  // Unmaps every mapping of a cached physical granule and gives it back to the source.
  void decommit_physical(std::uint32_t physical) noexcept;
  std::uint32_t new_node();                      // may throw std::bad_alloc; then unchanged
  static constexpr std::size_t kNodeBatch = 16;  // nodes new_node adds at least when the spare list is empty
  void free_node(std::uint32_t index) noexcept;  // never allocates (new_node reserves room)
  // The in-use index (expandable_arena.cpp). The writers (insert_slot, set_slot, erase_slot) keep slots_in_use_
  // equal to its entries; none allocates (reserve_slots makes the room first). A position is bucket x
  // kSlotsPerBucket + lane.
  static constexpr std::size_t kNoSlot = ~std::size_t{0};
  // The lanes of `bucket` holding `offset` (kEmptySlot: the empty lanes), one bit each, compared without a branch.
  static unsigned slot_lanes(const SlotBucket& bucket, std::size_t offset) noexcept {
    static_assert(kSlotsPerBucket == 4);
    const std::array<std::size_t, kSlotsPerBucket>& lane = bucket.offsets;
    return static_cast<unsigned>(lane[0] == offset) | static_cast<unsigned>(lane[1] == offset) << 1 |
           static_cast<unsigned>(lane[2] == offset) << 2 | static_cast<unsigned>(lane[3] == offset) << 3;
  }
  // The position of `offset`'s entry, or kNoSlot; the table must not be empty. Later buckets are looked at only
  // while entries passed the bucket.
  std::size_t find_slot(std::size_t offset) const noexcept {
    const std::size_t mask = slot_buckets_.size() - 1;
    for (std::size_t at = slot_home(offset);; at = (at + 1) & mask) {
      const SlotBucket& bucket = slot_buckets_[at];
      const unsigned lanes = slot_lanes(bucket, offset);
      if (lanes != 0) [[likely]] {
        return at * kSlotsPerBucket + static_cast<std::size_t>(std::countr_zero(lanes));
      }
      if (bucket.passed == 0) return kNoSlot;
    }
  }
  // Adds a block at an offset the table does not hold: the first empty lane from its home bucket on.
  void insert_slot(std::size_t offset, std::uint32_t index) noexcept {
    const std::size_t mask = slot_buckets_.size() - 1;
    std::size_t at = slot_home(offset);
    unsigned lanes = slot_lanes(slot_buckets_[at], kEmptySlot);
    while (lanes == 0) {  // a full bucket: seldom, at the table's load
      ++slot_buckets_[at].passed;
      at = (at + 1) & mask;
      lanes = slot_lanes(slot_buckets_[at], kEmptySlot);
    }
    const auto lane = static_cast<std::size_t>(std::countr_zero(lanes));
    slot_buckets_[at].offsets[lane] = offset;
    slot_buckets_[at].indices[lane] = index;
    ++slots_in_use_;
  }
  std::uint32_t block_at(std::size_t offset) const noexcept;  // the in-use block at `offset`, or kNone
  // Names `index` (kNone: no block) as the in-use block at `offset`.
  void set_slot(std::size_t offset, std::uint32_t index) noexcept;
  void erase_slot(std::size_t position) noexcept;  // removes the entry at `position` (find_slot's, not kNoSlot)
  // Room for `blocks` in-use blocks filling at most 1 / kSlotsPerBlock of the table's lanes (a bucket seldom
  // overflows; one more block may come and go in a move). May throw std::bad_alloc; then unchanged.
  void reserve_slots(std::size_t blocks) {
    if (kSlotsPerBlock * blocks > kSlotsPerBucket * slot_buckets_.size()) grow_slots(blocks);
  }
  void grow_slots(std::size_t blocks);  // reserve_slots' rehash into a larger table
  static constexpr std::size_t kSlotsPerBlock = 4;
  // Fibonacci hashing: the top bits of the offset times 2^64 / phi (the low bits of offsets are all zero).
  std::size_t slot_home(std::size_t offset) const noexcept {
    return static_cast<std::size_t>((static_cast<std::uint64_t>(offset) * 0x9E3779B97F4A7C15ULL) >> slot_shift_);
  }
  // Free index (expandable_arena_free_index.cpp). The key of a block is (size, offset): erase it before
  // changing either.
  void insert_free(std::uint32_t index) noexcept { insert_free(index, bin_of(nodes_[index].size)); }
  void insert_free(std::uint32_t index, std::size_t bin) noexcept;  // `bin` is bin_of(its size)
  void erase_free(std::uint32_t index) noexcept;
  // Gives a block in the index a new key, moving it only when it passes its neighbour in the order.
  void rekey_free(std::uint32_t index, std::size_t offset, std::size_t size) noexcept;
  static std::uint32_t treap_priority(std::uint32_t index) noexcept;
  // Sizes under kSubBins x 256 bytes have a bin each (bin = size / 256; bin 0 holds no block, only a lower bound
  // under 256 starts there); larger ones kSubBins per power of two (the kSubBinBits bits after the leading one
  // of size / 256), capped at the last bin. Monotonic in the size, so the bins in turn give the global order.
  // Without a branch: `shift` is 0 below kSubBins units, where the formula gives the units themselves.
  static std::size_t bin_of(std::size_t size) noexcept {
    const std::size_t units = size / kBlockAlignment;
    const auto log = static_cast<std::size_t>(std::bit_width(units | 1)) - 1;
    const std::size_t shift = std::max(log, kSubBinBits) - kSubBinBits;
    return std::min<std::size_t>((shift << kSubBinBits) + (units >> shift), kBins - 1);
  }
  void mark_bin(std::size_t bin) noexcept {
    nonempty_bins_[bin / 64] |= std::uint64_t{1} << (bin % 64);
    nonempty_words_ |= std::uint64_t{1} << (bin / 64);
  }
  void unmark_bin(std::size_t bin) noexcept {
    nonempty_bins_[bin / 64] &= ~(std::uint64_t{1} << (bin % 64));
    if (nonempty_bins_[bin / 64] == 0) nonempty_words_ &= ~(std::uint64_t{1} << (bin / 64));
  }
  std::uint32_t first_in_bin_after(std::size_t bin) const noexcept;  // smallest block of a later bin
  std::uint32_t last_in_bin_before(std::size_t bin) const noexcept;  // largest block of an earlier bin
  std::uint32_t tree_next(std::uint32_t index) const noexcept;       // in order, within the block's bin
  std::uint32_t tree_prev(std::uint32_t index) const noexcept;
  bool free_less(std::uint32_t a, std::uint32_t b) const noexcept;
  std::uint32_t free_lower_bound(std::size_t size) const noexcept;  // smallest free block >= size, or kNone
  std::uint32_t free_next(std::uint32_t index) const noexcept;      // in (size, offset) order
  std::uint32_t free_prev(std::uint32_t index) const noexcept;
  std::uint32_t free_last() const noexcept;
  bool free_contains(std::uint32_t index) const noexcept;  // by key descent from the root
  std::string check_free_index(std::size_t free_blocks) const;
  std::string check_kept(std::size_t kept_count, std::size_t kept_bytes) const;  // the kept lists and ring
  // Granule invariants, given each virtual granule's users and chunk mask recounted from the blocks.
  std::string check_granules(const std::vector<std::uint32_t>& users, const std::vector<std::uint64_t>& masks) const;
  // Granule sharing (expandable_arena_granules.cpp).
  // The chunks of `granule` that [offset, end) touches; none without sharing, where no decision reads chunks
  // (a granule with users keeps its physical granule, one without takes a fresh one), so masks stay 0.
  std::uint64_t piece_mask(std::size_t granule, std::size_t offset, std::size_t end) const noexcept {
    if (!options_.share_granules) return 0;
    const std::size_t start = granule * granularity_;
    const std::size_t low = (std::max(offset, start) - start) >> chunk_shift_;
    const std::size_t high =
        (std::min(end, start + granularity_) - start + (std::size_t{1} << chunk_shift_) - 1) >> chunk_shift_;
    const std::uint64_t below_high = high >= kChunks ? kAllChunks : (std::uint64_t{1} << high) - 1;
    return below_high & ~((std::uint64_t{1} << low) - 1);
  }
  // What granule `granule` needs to take `mask`, given that an earlier piece of the same block took
  // `taken_mask` of physical granule `taken`.
  Choice choose(std::size_t granule, std::uint64_t mask, std::uint32_t taken, std::uint64_t taken_mask) const noexcept;
  // A partly used physical granule whose free bottom or top chunks hold `mask`, tightest first, or kNone.
  std::uint32_t find_partial(std::uint64_t mask, std::uint32_t taken, std::uint64_t taken_mask) const noexcept;
  void partial_insert(std::uint32_t physical) noexcept;
  void partial_remove(std::uint32_t physical) noexcept;
  void map_granule(std::size_t granule, std::uint32_t physical);  // may throw OutOfMemoryError; then unchanged
  void unlink_mapping(std::size_t granule) noexcept;
  void take_piece(std::size_t granule, std::uint64_t mask) noexcept;
  void drop_piece(std::size_t granule, std::uint64_t mask) noexcept;
  std::uint32_t new_physical();  // creates one (cached, unmapped); may throw OutOfMemoryError
  // Without sharing, the cached physical granule for a granule of a block whose later granules [from, end) are
  // still to be placed, or kNone when every cached one is claimed by them (then a new one is needed).
  std::uint32_t exclusive_victim(std::size_t from, std::size_t end) const noexcept;
  static constexpr std::size_t kVictimCandidates = 4;  // least recently freed cached granules exclusive_victim weighs
  void lru_push_newest(std::uint32_t physical) noexcept;
  void lru_remove(std::uint32_t physical) noexcept;
  // Drops an in-use block's pieces; call before release_block (the neighbours decide shared end chunks).
  void release_granules(std::uint32_t block) noexcept;
  std::size_t largest_committed_free_block() const;
  std::size_t first_granule(std::size_t offset) const noexcept { return offset >> granule_shift_; }
  std::size_t end_granule(std::size_t offset, std::size_t size) const noexcept {
    return (offset + size + granularity_ - 1) >> granule_shift_;
  }
  // No placement of `size` bytes takes fewer fresh granules: it touches at least ceil(size / granularity)
  // granules, and all but the two end ones lie wholly in a free block or past the extent. Placements compare
  // by fresh granules (new granules follow from them and cached_count_), so one that reaches this bound is
  // the best: the search may stop there without changing its choice.
  // Without sharing, the fresh granules of a placement touching granules [first, end): each granule with
  // users has a physical granule of its own, which a piece keeps; the others take a fresh one. Only the two
  // end granules can have users (the others lie wholly in the free block or past the extent).
  std::size_t exclusive_fresh_granules(std::size_t first, std::size_t end) const noexcept {
    std::size_t fresh = end - first;
    if (first < granules_.size() && granules_[first].users != 0) --fresh;
    if (end - 1 != first && end - 1 < granules_.size() && granules_[end - 1].users != 0) --fresh;
    return fresh;
  }
  // exclusive_fresh_granules of [offset, + size) inside a free block, without a branch: a free block lies in
  // the extent, which granules_ covers, so both end granules are in the table.
  std::size_t fresh_granules_inside(std::size_t offset, std::size_t size) const noexcept {
    const std::size_t first = first_granule(offset);
    const std::size_t last = first_granule(offset + size - 1);
    return last - first + 1 - static_cast<std::size_t>(granules_[first].users != 0) -
           static_cast<std::size_t>((last != first) & (granules_[last].users != 0));
  }
  std::size_t min_fresh_granules(std::size_t size) const noexcept {
    const std::size_t touched = (size + granularity_ - 1) >> granule_shift_;
    return touched > 2 ? touched - 2 : 0;
  }
  // Compaction (expandable_arena_compaction.cpp). Passes over the in-use blocks, at most: each costs
  // O(blocks x blocks below) (a block looks for the lowest hole that takes it).
  static constexpr std::size_t kCompactionPasses = 4;
  struct Move {
    std::uint32_t hole = kNone;  // free block that takes the block (below it, except for evacuations)
    std::size_t offset = 0;      // the block's new offset, inside the hole
    bool valid = false;
  };
  // Physical granules the block would take fresh at `offset` (in the hole) and those it would give back.
  struct MoveCost {
    std::size_t fresh = 0;
    std::size_t freed = 0;
  };
  MoveCost move_cost(std::uint32_t block, std::size_t offset) const noexcept;
  bool remaps(std::size_t block_offset, std::size_t offset, std::size_t size, std::size_t granule) const noexcept;
  Move find_move(std::uint32_t block) const;
  // Moves the block; false (nothing changed) when a granule cannot be taken or mapped.
  bool move_block(std::uint32_t block, const Move& move, CompactionResult& result);
  // Sliding compaction (compaction before growth): from a start free block up to the extent's end, each
  // in-use block the relocator lets move slides down over the free block below it, so the free blocks gather
  // into one that rises to the end and is cut off. Starts at the highest free block with `bytes` free from it
  // to the end (slide_start), so only the blocks above it are copied.
  CompactionResult compact_sliding(Relocator& relocator, std::size_t bytes);
  // Evacuating compaction (compaction before growth, tried before sliding): frees whole granules for a request
  // of `size` bytes by moving every in-use block out of the granules whose blocks hold the fewest bytes, each
  // into a free block where it takes no fresh granule, until the request needs no new one. Copies about the
  // bytes of the blocks it moves, where sliding copies everything above its start.
  CompactionResult compact_evacuating(Relocator& relocator, std::size_t size);
  // A free block (and an end of it) that takes the in-use block without a fresh granule and without touching
  // granule `avoid`; invalid when none of the smallest kMaxEvacuationHoles free blocks that hold it does.
  Move find_evacuation(std::uint32_t block, std::size_t avoid) const;
  static constexpr std::size_t kMaxEvacuationHoles = 64;
  static constexpr std::size_t kMaxEvacuationGranules = 2;
  std::uint32_t slide_start(std::size_t bytes) const noexcept;
  bool slide_block(std::uint32_t block, CompactionResult& result);
  // Growth pressure (expandable_arena_growth.cpp): runs the hook and compaction before `placement` commits
  // new granules, and returns the placement to take then. Called with the lock held; releases it around the hook.
  [[gnu::noinline]] Placement relieve_growth_pressure(std::size_t size, Placement placement);
  bool compaction_pays(std::size_t size, const Placement& placement, bool repeat_guard) const noexcept;
  CompactionResult compact_locked(Relocator& relocator);
  // Adds a compaction that moved blocks to stats_ (num_compactions, bytes_compacted); the caller holds mutex_.
  void count_compaction(const CompactionResult& result) noexcept;
  CompactionResult start_compaction() const noexcept;
  CompactionResult finish_compaction(CompactionResult& result, std::size_t used_before, bool give_back = true);
  [[noreturn]] void throw_out_of_memory(std::size_t requested, std::size_t rounded, const AllocationTag& tag,
                                        const std::string& detail);

  // Immutable after construction.
  std::unique_ptr<VirtualMemory> owned_memory_;
  VirtualMemory* memory_;
  ArenaOptions options_;
  std::size_t granularity_ = 0;
  std::size_t granule_shift_ = 0;  // log2(granularity_)
  std::size_t range_bytes_ = 0;
  char* base_ = nullptr;

  mutable AllocatorMutex mutex_;  // guards everything below
  std::vector<Block> nodes_;
  std::vector<std::uint32_t> spare_nodes_;
  std::uint32_t first_block_ = kNone;  // block at offset 0
  std::uint32_t last_block_ = kNone;   // block ending at extent_; always in use (a free tail is cut off)
  std::size_t extent_ = 0;
  std::array<std::uint32_t, kBins> bin_roots_ = filled_roots();  // each bin's treap root
  // Bit i % 64 of word i / 64: bin i holds a block. One word more than the bins need, always 0: a search past the
  // last bin lands there.
  std::array<std::uint64_t, kBinWords + 1> nonempty_bins_{};
  std::uint64_t nonempty_words_ = 0;  // bit w: word w of nonempty_bins_ is not 0
  std::size_t free_count_ = 0;
  static constexpr std::size_t kEmptySlot = ~std::size_t{0};
  std::vector<SlotBucket> slot_buckets_;  // the in-use index: empty, or a power of two of buckets
  unsigned slot_shift_ = 63;              // 64 - log2(slot_buckets_.size()): slot_home takes the hash's top bits
  std::size_t slots_in_use_ = 0;          // entries of slot_buckets_ that are not empty
  std::size_t in_use_count_ = 0;
  std::vector<Granule> granules_;               // virtual granules: covers the largest extent so far
  std::vector<Physical> physicals_;             // physical granules, committed or not
  std::vector<std::uint32_t> free_physicals_;   // uncommitted entries of physicals_; capacity >= its size
  std::vector<std::uint32_t> created_scratch_;  // empty between calls: acquire_for's new physical granules
  std::array<std::array<std::uint32_t, kChunks>, 2> partial_heads_ = {filled_partials(), filled_partials()};
  std::array<std::uint64_t, 2> partial_nonempty_ = {0, 0};  // bit i: partial list [end][i] is not empty
  std::uint32_t lru_oldest_ = kNone;                        // cached physical granules, least recently freed first
  std::uint32_t lru_newest_ = kNone;
  std::size_t cached_count_ = 0;
  std::uint64_t events_ = 0;               // allocate and deallocate calls so far: the decay's clock
  std::size_t committed_granules_ = 0;     // committed physical granules
  std::size_t chunk_shift_ = 0;            // log2(granularity_ / kChunks)
  std::vector<std::size_t> move_scratch_;  // empty between calls: move_block's taken and remapped granules
  // The last compaction, until an allocation succeeds: an OutOfMemoryReport thrown meanwhile carries it.
  std::optional<CompactionResult> last_compaction_;
  GrowthHook growth_hook_;          // set only while no allocation is in flight
  Relocator* relocator_ = nullptr;  // idem
  bool relieves_growth_ = false;    // a hook, or compact_before_growth with a relocator
  std::size_t residual_free_ = 0;   // bytes free inside the reservation after the last compaction before growth
  GrowthPressureStats growth_;
  MemoryStats stats_;
  // Exact-size reuse: each bin's kept blocks, most recently kept first; the keep order as a ring of node indices
  // (an entry whose node is no longer kept is skipped); the kept bytes and blocks; this round's keeps and hits;
  // frees left in a pause.
  std::array<std::uint32_t, kBins> kept_heads_ = filled_roots();
  std::vector<std::uint32_t> kept_ring_;  // kKeptRing entries when reuse is on
  std::size_t kept_front_ = 0;
  std::size_t kept_entries_ = 0;
  std::size_t kept_bytes_ = 0;
  std::size_t kept_blocks_ = 0;
  std::uint64_t round_keeps_ = 0;
  std::uint64_t round_hits_ = 0;
  std::uint64_t pause_left_ = 0;
  ReuseStats reuse_;
};

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
// Physical granules shared between virtual granules: the sources' memfd mappings (one granule visible at two
// places, released pages leave the memfd, memfd_create failure is a typed error) and the ExpandableArena
// packing blocks from different virtual granules into one physical granule (contents and invariants after
// random operations with a fixed seed; the random trace's footprint).
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "memory/support/arena_test_options.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/host_virtual_memory.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"
#include "tensorpool/memory/trace_generators.hpp"

namespace {

using tp::kKiB;
using tp::kMiB;
using tp::memory::ExpandableArena;
using tp::memory::HostVirtualMemory;
using tp::memory::SimDeviceMemory;
using tp::memory::TraceAction;
using tp::memory::testing::arena_options;

constexpr std::size_t kGranule = 2 * kMiB;

TEST(PhysicalGranules, OneGranuleMappedAtTwoPlacesShowsTheSameBytes) {
  HostVirtualMemory memory(4 * kGranule);
  char* base = static_cast<char*>(memory.reserve(2 * kGranule));
  const auto handle = memory.create_physical();
  EXPECT_EQ(memory.committed_bytes(), kGranule);
  memory.map(base, handle);
  memory.map(base + kGranule, handle);
  std::memset(base + 100, 0x5a, 1000);
  base[kGranule + 5000] = 7;
  EXPECT_EQ(base[kGranule + 100], 0x5a);
  EXPECT_EQ(base[kGranule + 1099], 0x5a);
  EXPECT_EQ(base[5000], 7);
  EXPECT_GE(memory.physical_resident_bytes(), 4 * kKiB);
  memory.unmap(base);
  memory.unmap(base + kGranule);
  memory.release_physical(handle);
  EXPECT_EQ(memory.committed_bytes(), 0u);
  EXPECT_EQ(memory.physical_resident_bytes(), 0u);  // the pages were punched out of the memfd
  memory.unreserve(base, 2 * kGranule);
}

TEST(PhysicalGranules, CapacityCountsPhysicalGranules) {
  HostVirtualMemory memory(2 * kGranule);
  const auto first = memory.create_physical();
  const auto second = memory.create_physical();
  EXPECT_NE(first, second);
  EXPECT_THROW((void)memory.create_physical(), tp::OutOfMemoryError);
  memory.release_physical(first);
  const auto again = memory.create_physical();  // the released slice is reused
  EXPECT_EQ(again, first);
  memory.release_physical(again);
  memory.release_physical(second);

  SimDeviceMemory device(2 * kGranule, "sim_sharing");
  void* other = device.allocate(kGranule);
  const auto one = device.create_physical();
  EXPECT_EQ(device.used_bytes(), 2 * kGranule);
  EXPECT_THROW((void)device.create_physical(), tp::OutOfMemoryError);
  device.deallocate(other, kGranule);
  const auto two = device.create_physical();
  device.release_physical(one);
  device.release_physical(two);
  EXPECT_EQ(device.used_bytes(), 0u);
  EXPECT_EQ(device.committed_bytes(), 0u);
}

TEST(PhysicalGranules, MemfdCreateFailureIsADeviceError) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sanitizer probes memory through a pipe of its own; with no file descriptor left it reports every
  // checked access as invalid, so the refusal cannot be staged under one.
  GTEST_SKIP() << "sanitizers need free file descriptors for their own checks";
#else
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit none = saved;
  none.rlim_cur = 0;  // no new file descriptor can be opened
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &none), 0);
  std::string message;
  try {
    HostVirtualMemory memory;
  } catch (const tp::DeviceError& error) {
    message = error.what();
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_NE(message.find("memfd_create"), std::string::npos) << message;
  EXPECT_NE(message.find("ulimit -n"), std::string::npos) << message;
#endif
}

// Virtual granules touched by in-use blocks: what the arena committed before granules could be shared.
std::size_t touched_granules(const ExpandableArena& arena) {
  std::vector<bool> touched;
  for (const ExpandableArena::BlockInfo& block : arena.blocks()) {
    if (!block.in_use) continue;
    const std::size_t end = (block.offset + block.size + kGranule - 1) / kGranule;
    if (touched.size() < end) touched.resize(end, false);
    for (std::size_t granule = block.offset / kGranule; granule < end; ++granule) touched[granule] = true;
  }
  std::size_t count = 0;
  for (const bool is_touched : touched) count += is_touched ? 1 : 0;
  return count;
}

TEST(ExpandableArenaSharing, TailAndHeadOfDistantBlocksShareOneGranule) {
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), arena_options(64 * kMiB, 0, true));
  // a: granule 0 and the bottom half of granule 1; b: the top half of granule 1 and granule 2.
  void* a = arena.allocate(3 * kMiB);
  void* b = arena.allocate(3 * kMiB);
  std::memset(b, 0x42, 3 * kMiB);
  arena.deallocate(a, 3 * kMiB);
  EXPECT_EQ(arena.committed_bytes(), 2 * kGranule);  // granule 1 and 2 stay; granule 0 is cached
  arena.trim();
  EXPECT_EQ(arena.committed_bytes(), 2 * kGranule);
  // c fits the free bottom half of granule 1, which b's head leaves: no new physical granule.
  void* c = arena.allocate(kMiB);
  std::memset(c, 0x17, kMiB);
  ASSERT_EQ(arena.check_invariants(), "");
  EXPECT_EQ(arena.committed_bytes(), 2 * kGranule);  // c lives in granule 1's free half
  for (std::size_t at = 0; at < 3 * kMiB; at += 4 * kKiB) ASSERT_EQ(static_cast<unsigned char*>(b)[at], 0x42);
  // A block far from b whose piece lands in the physical granule b's head uses: written through another
  // virtual granule, read back intact, b untouched.
  std::vector<void*> spread;
  for (int i = 0; i < 8; ++i) spread.push_back(arena.allocate(kMiB + 512 * kKiB));
  for (void* ptr : spread) std::memset(ptr, 0x66, kMiB + 512 * kKiB);
  ASSERT_EQ(arena.check_invariants(), "");
  EXPECT_LT(arena.committed_bytes(), touched_granules(arena) * kGranule) << "no granule was shared";
  for (std::size_t at = 0; at < 3 * kMiB; at += 4 * kKiB) ASSERT_EQ(static_cast<unsigned char*>(b)[at], 0x42);
  for (std::size_t at = 0; at < kMiB; at += 4 * kKiB) ASSERT_EQ(static_cast<unsigned char*>(c)[at], 0x17);
  for (void* ptr : spread) arena.deallocate(ptr, kMiB + 512 * kKiB);
  arena.deallocate(c, kMiB);
  arena.deallocate(b, 3 * kMiB);
  EXPECT_EQ(arena.check_invariants(), "");
}

// A free block whose low end takes a request (with a fresh granule) while its high end cannot (the chunks it
// would use in the next block's granule are another virtual granule's in their shared physical granule): the
// block takes the request at its low end. An invalid end must never win over a valid one by its fresh count,
// which it does not have; here the range has no room past the extent, so losing the block is an OOM.
TEST(ExpandableArenaSharing, AFreeBlockWhoseHighEndCannotShareTakesTheRequestAtItsLowEnd) {
  auto options = arena_options(64 * kMiB, 0, true);
  options.reserve_bytes = 16 * kMiB;
  ExpandableArena arena(std::make_unique<HostVirtualMemory>(), options);
  const auto base = reinterpret_cast<char*>(arena.base_address());
  const auto offset_of = [base](void* ptr) { return static_cast<std::size_t>(static_cast<char*>(ptr) - base); };
  void* p = arena.allocate(2 * kMiB);  // granule 0
  void* q = arena.allocate(2 * kMiB);  // granule 1
  void* r = arena.allocate(2 * kMiB);  // granule 2
  void* a = arena.allocate(5 * kMiB);  // granules 3, 4 and the bottom half of 5
  void* b = arena.allocate(3 * kMiB);  // the top half of granule 5 and granule 6
  void* c = arena.allocate(kMiB);      // the bottom half of granule 7: the extent is 15 MiB
  ASSERT_EQ(offset_of(b), 11 * kMiB);
  ASSERT_EQ(offset_of(c), 14 * kMiB);
  arena.deallocate(q, 2 * kMiB);  // granule 1 is released
  arena.deallocate(a, 5 * kMiB);  // [6, 11) MiB is free; granule 5's physical granule has a free bottom half
  // h shares granule 5's physical granule through granule 1: no granule is committed for it.
  const std::size_t committed = arena.committed_bytes();
  void* h = arena.allocate(kMiB);
  ASSERT_EQ(offset_of(h), 2 * kMiB);
  ASSERT_EQ(arena.committed_bytes(), committed);
  // [6, 11) MiB: its low end takes 2 MiB (granule 3, fresh); its high end's piece in granule 5 would overlap h.
  void* y = arena.allocate(2 * kMiB);
  EXPECT_EQ(offset_of(y), 6 * kMiB);
  EXPECT_EQ(arena.stats().num_retries, 0u);
  EXPECT_EQ(arena.check_invariants(), "");
  arena.deallocate(y, 2 * kMiB);
  arena.deallocate(h, kMiB);
  arena.deallocate(c, kMiB);
  arena.deallocate(b, 3 * kMiB);
  arena.deallocate(r, 2 * kMiB);
  arena.deallocate(p, 2 * kMiB);
  EXPECT_EQ(arena.check_invariants(), "");
}

// Random sizes around the granule, random frees, occasional trims: every block's bytes survive whatever
// granules were shared, no invariant breaks, and sharing happens exactly when it is on.
void run_random_operations(bool share) {
  const std::uint64_t seed = 23;
  SCOPED_TRACE("seed " + std::to_string(seed) + (share ? ", sharing" : ", no sharing"));
  std::mt19937_64 random(seed);
  auto memory = std::make_unique<HostVirtualMemory>();
  HostVirtualMemory& source = *memory;
  ExpandableArena arena(std::move(memory), arena_options(96 * kMiB, 4 * kMiB, share));
  std::map<unsigned char*, std::pair<std::size_t, unsigned char>> live;
  std::size_t shared_seen = 0;
  for (int op = 0; op < 3000; ++op) {
    if (random() % 100 < 55 || live.empty()) {
      const std::size_t bytes = 1 + random() % (3 * kMiB);
      unsigned char* ptr = nullptr;
      try {
        ptr = static_cast<unsigned char*>(arena.allocate(bytes));
      } catch (const tp::OutOfMemoryError&) {
        continue;
      }
      const auto tag = static_cast<unsigned char>(op);
      for (std::size_t at = 0; at < bytes; at += 16 * kKiB) ptr[at] = tag;
      ptr[bytes - 1] = tag;
      live.emplace(ptr, std::make_pair(bytes, tag));
    } else if (random() % 50 != 0) {
      auto victim = live.begin();
      std::advance(victim, static_cast<long>(random() % live.size()));
      const auto [bytes, tag] = victim->second;
      for (std::size_t at = 0; at < bytes; at += 16 * kKiB) ASSERT_EQ(victim->first[at], tag) << "op " << op;
      ASSERT_EQ(victim->first[bytes - 1], tag) << "op " << op;
      arena.deallocate(victim->first, bytes);
      live.erase(victim);
    } else {
      arena.trim();
    }
    if (arena.committed_bytes() < touched_granules(arena) * kGranule) ++shared_seen;
    ASSERT_EQ(arena.check_invariants(), "") << "op " << op;
    ASSERT_EQ(source.committed_bytes(), arena.committed_bytes());
  }
  if (share) {
    EXPECT_GT(shared_seen, 0u);
  } else {
    EXPECT_EQ(shared_seen, 0u);
  }
  for (const auto& [ptr, block] : live) arena.deallocate(ptr, block.first);
  arena.trim();
  EXPECT_EQ(source.committed_bytes(), 0u);
  EXPECT_EQ(source.physical_resident_bytes(), 0u);  // trim punched every page out of the memfd
}

TEST(ExpandableArenaSharing, RandomOperationsKeepContentsAndInvariants) {
  run_random_operations(true);
  run_random_operations(false);
}

// The bundled random trace (tensorpool trace generate random, seed 1: bench/traces/data/random.csv), replayed
// in order on a sim device of 4 x its peak live bytes. Deterministic: placements depend only on the trace.
TEST(ExpandableArenaSharing, RandomTraceFootprint) {
  const tp::memory::Trace trace = tp::memory::generate_random_trace();
  SimDeviceMemory device(4 * trace.peak_live_bytes());
  ExpandableArena arena(device, arena_options(4 * trace.peak_live_bytes(), 64 * kMiB, true));
  std::vector<void*> pointers(trace.size(), nullptr);
  const auto& events = trace.events();
  for (std::size_t index = 0; index < events.size(); ++index) {
    if (events[index].action == TraceAction::allocate) {
      pointers[index] = arena.allocate(events[index].size);
    } else if (events[index].action == TraceAction::free) {
      const std::size_t partner = trace.partner(index);
      arena.deallocate(pointers[partner], events[partner].size);
      pointers[partner] = nullptr;
    }
  }
  for (std::size_t index = 0; index < events.size(); ++index) {
    if (pointers[index] != nullptr) arena.deallocate(pointers[index], events[index].size);
  }
  const double live = static_cast<double>(trace.peak_live_bytes());
  const double reserved = static_cast<double>(arena.stats().peak_bytes_reserved);
  // Guards what sharing gains over one physical granule per touched virtual granule (1.161 x live without it);
  // the target (1.05 x live + one granule) is tighter.
  EXPECT_LE(reserved, 1.14 * live) << "peak reserved " << reserved / static_cast<double>(kMiB) << " MiB";
  EXPECT_EQ(arena.check_invariants(), "");
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// PagedVirtualMemory's bookkeeping over a fake page driver (no GPU): granule arithmetic, the capacity wall,
// rollback of a commit refused half way, shared physical pages, the overlapping copy, and the expandable arena
// and a cuda-named memory stack running on it unchanged.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <vector>

#include "backend/cuda/cuda_memory_pages.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::backend::cuda {
namespace {

constexpr std::size_t kPage = std::size_t{2} << 20;

// What the fake saw, shared with the test after the driver is moved into the PagedVirtualMemory.
struct Ledger {
  std::set<std::uint64_t> live;                // created, not released
  std::map<std::uintptr_t, std::uint64_t> at;  // mapped address -> handle
  std::map<std::uintptr_t, std::size_t> reservations;
  std::uint64_t next_handle = 1;
  std::uintptr_t next_address = std::uintptr_t{1} << 40;
  std::optional<std::size_t> create_refused_after;  // pages alive at once before the device runs out
  bool map_refuses = false;
  bool create_throws = false;
  std::size_t creates = 0;
  std::size_t disjoint_copies = 0;
};

class FakePageDriver final : public PageDriver {
 public:
  explicit FakePageDriver(Ledger& ledger) : ledger_(ledger) {}
  std::size_t granularity() const noexcept override { return kPage; }
  std::uintptr_t reserve(std::size_t bytes) override {
    const std::uintptr_t base = ledger_.next_address;
    ledger_.next_address += bytes + kPage;  // a gap: neighbouring ranges are not one range
    ledger_.reservations.emplace(base, bytes);
    return base;
  }
  void free_reservation(std::uintptr_t base, std::size_t bytes) noexcept override {
    const auto it = ledger_.reservations.find(base);
    EXPECT_NE(it, ledger_.reservations.end());
    if (it == ledger_.reservations.end()) return;
    EXPECT_EQ(it->second, bytes);
    for (const auto& [address, handle] : ledger_.at) {
      EXPECT_FALSE(address >= base && address < base + bytes) << "freed a range with a page still mapped";
    }
    ledger_.reservations.erase(it);
  }
  std::optional<std::uint64_t> create() override {
    if (ledger_.create_throws) TP_THROW(DeviceError, "cuda", "cuMemCreate failed: CUDA_ERROR_INVALID_VALUE");
    if (ledger_.create_refused_after.has_value() && ledger_.live.size() >= *ledger_.create_refused_after) {
      return std::nullopt;
    }
    ++ledger_.creates;
    const std::uint64_t handle = ledger_.next_handle++;
    ledger_.live.insert(handle);
    return handle;
  }
  void release(std::uint64_t handle) noexcept override {
    EXPECT_EQ(ledger_.live.erase(handle), 1U) << "released a handle twice or one never created";
    for (const auto& [address, mapped] : ledger_.at) EXPECT_NE(mapped, handle) << "released a mapped page";
  }
  bool map(std::uintptr_t address, std::uint64_t handle) override {
    EXPECT_TRUE(ledger_.live.contains(handle));
    EXPECT_EQ(address % kPage, 0U);
    EXPECT_FALSE(ledger_.at.contains(address)) << "mapped over a mapping (CUDA refuses that)";
    if (ledger_.map_refuses) return false;
    ledger_.at.emplace(address, handle);
    return true;
  }
  void unmap(std::uintptr_t address) noexcept override { EXPECT_EQ(ledger_.at.erase(address), 1U); }
  void copy_disjoint(void* to, const void* from, std::size_t bytes) noexcept override {
    const auto* a = static_cast<const unsigned char*>(to);
    const auto* b = static_cast<const unsigned char*>(from);
    EXPECT_TRUE(a + bytes <= b || b + bytes <= a) << "copy_disjoint given overlapping ranges";
    std::memcpy(to, from, bytes);
    ++ledger_.disjoint_copies;
  }
  std::string describe_refusal(const char* call) const override { return std::string(call) + " refused (fake)"; }

 private:
  Ledger& ledger_;
};

std::unique_ptr<PagedVirtualMemory> make_pages(Ledger& ledger, std::optional<std::size_t> capacity) {
  return std::make_unique<PagedVirtualMemory>(std::make_unique<FakePageDriver>(ledger), "cuda:0", capacity);
}

char* at(void* base, std::size_t offset) { return static_cast<char*>(base) + offset; }

TEST(CudaMemoryPages, CommitMapsOnePagePerGranuleAndDecommitReleasesThem) {
  Ledger ledger;
  auto pages = make_pages(ledger, 16 * kPage);
  EXPECT_EQ(pages->granularity(), kPage);
  void* base = pages->reserve(8 * kPage);
  pages->commit(at(base, kPage), 3 * kPage);
  EXPECT_EQ(pages->committed_bytes(), 3 * kPage);
  EXPECT_EQ(ledger.at.size(), 3U);
  EXPECT_EQ(ledger.live.size(), 3U);
  // Granules already committed stay as they are: only the new one takes a page.
  pages->commit(at(base, 2 * kPage), 3 * kPage);
  EXPECT_EQ(pages->committed_bytes(), 4 * kPage);
  EXPECT_EQ(ledger.live.size(), 4U);
  pages->decommit(at(base, kPage), 2 * kPage);
  EXPECT_EQ(pages->committed_bytes(), 2 * kPage);
  EXPECT_EQ(ledger.at.size(), 2U);
  EXPECT_EQ(ledger.live.size(), 2U);
  pages->unreserve(base, 8 * kPage);  // unmaps and releases what is left first
  EXPECT_EQ(pages->committed_bytes(), 0U);
  EXPECT_TRUE(ledger.live.empty());
  EXPECT_TRUE(ledger.reservations.empty());
}

TEST(CudaMemoryPages, RejectsRangesThatAreNotGranulesOfOneReservation) {
  Ledger ledger;
  auto pages = make_pages(ledger, std::nullopt);
  EXPECT_THROW(static_cast<void>(pages->reserve(kPage + 1)), InvalidArgument);
  EXPECT_THROW(static_cast<void>(pages->reserve(0)), InvalidArgument);
  void* base = pages->reserve(2 * kPage);
  EXPECT_THROW(pages->commit(at(base, 4096), kPage), InvalidArgument);                                 // misaligned
  EXPECT_THROW(pages->commit(base, 3 * kPage), InvalidArgument);                                       // past the end
  EXPECT_THROW(pages->commit(at(base, -static_cast<std::ptrdiff_t>(kPage)), kPage), InvalidArgument);  // before it
  EXPECT_EQ(pages->committed_bytes(), 0U);
  EXPECT_TRUE(ledger.live.empty());
}

TEST(CudaMemoryPages, TheCapacityIsAWallAndARefusedCommitChangesNothing) {
  Ledger ledger;
  auto pages = make_pages(ledger, 3 * kPage);
  void* base = pages->reserve(8 * kPage);
  pages->commit(base, kPage);
  try {
    pages->commit(at(base, kPage), 3 * kPage);
    FAIL() << "committing past the capacity succeeded";
  } catch (const OutOfMemoryError& error) {
    EXPECT_EQ(error.report().requested_bytes, 3 * kPage);
    EXPECT_NE(error.report().detail.find("capacity"), std::string::npos) << error.report().detail;
  }
  EXPECT_EQ(pages->committed_bytes(), kPage);
  EXPECT_EQ(ledger.at.size(), 1U);
  EXPECT_EQ(ledger.live.size(), 1U);
  pages->commit(at(base, kPage), 2 * kPage);  // exactly to the wall
  EXPECT_EQ(pages->committed_bytes(), 3 * kPage);
}

TEST(CudaMemoryPages, ADeviceOutOfMemoryHalfWayRollsTheCommitBack) {
  Ledger ledger;
  ledger.create_refused_after = 3;
  auto pages = make_pages(ledger, std::nullopt);
  void* base = pages->reserve(8 * kPage);
  pages->commit(base, kPage);
  EXPECT_THROW(pages->commit(at(base, kPage), 4 * kPage), OutOfMemoryError);  // the third new page is refused
  EXPECT_EQ(pages->committed_bytes(), kPage);
  EXPECT_EQ(ledger.at.size(), 1U);
  EXPECT_EQ(ledger.live.size(), 1U);
  EXPECT_EQ(pages->live_pages(), 1U);
}

TEST(CudaMemoryPages, ARefusedMapOrAFailingDriverRollsTheCommitBack) {
  Ledger ledger;
  auto pages = make_pages(ledger, std::nullopt);
  void* base = pages->reserve(4 * kPage);
  ledger.map_refuses = true;
  EXPECT_THROW(pages->commit(base, 2 * kPage), OutOfMemoryError);
  EXPECT_TRUE(ledger.live.empty());
  ledger.map_refuses = false;
  pages->commit(base, kPage);
  ledger.create_throws = true;
  EXPECT_THROW(pages->commit(at(base, kPage), 2 * kPage), DeviceError);
  EXPECT_EQ(pages->committed_bytes(), kPage);
  EXPECT_EQ(ledger.live.size(), 1U);
}

TEST(CudaMemoryPages, PhysicalPagesMapAtSeveralPlacesAndCountOnce) {
  Ledger ledger;
  auto pages = make_pages(ledger, 2 * kPage);
  void* base = pages->reserve(4 * kPage);
  pages->commit(base, kPage);
  const auto handle = pages->create_physical();
  EXPECT_EQ(pages->committed_bytes(), 2 * kPage);
  EXPECT_THROW(static_cast<void>(pages->create_physical()), OutOfMemoryError);  // the wall counts both kinds
  pages->map(at(base, 2 * kPage), handle);
  pages->map(at(base, 3 * kPage), handle);
  // Mapping over a committed granule gives its page back.
  pages->map(base, handle);
  EXPECT_EQ(pages->committed_bytes(), kPage);
  EXPECT_EQ(ledger.live.size(), 1U);
  EXPECT_EQ(pages->mapped_granules(), 3U);
  EXPECT_THROW(pages->map(at(base, kPage), handle + 100), InvalidArgument);
  pages->unmap(base);
  pages->decommit(at(base, 2 * kPage), 2 * kPage);  // borrowed mappings: unmapped, the page stays
  EXPECT_EQ(ledger.live.size(), 1U);
  EXPECT_EQ(pages->mapped_granules(), 0U);
  pages->release_physical(handle);
  EXPECT_EQ(pages->committed_bytes(), 0U);
  EXPECT_TRUE(ledger.live.empty());
}

TEST(CudaMemoryPages, TheDestructorGivesEverythingBack) {
  Ledger ledger;
  {
    auto pages = make_pages(ledger, std::nullopt);
    void* base = pages->reserve(4 * kPage);
    pages->commit(base, 2 * kPage);
    pages->map(at(base, 3 * kPage), pages->create_physical());
    static_cast<void>(pages->create_physical());
  }
  EXPECT_TRUE(ledger.live.empty());
  EXPECT_TRUE(ledger.at.empty());
  EXPECT_TRUE(ledger.reservations.empty());
}

TEST(CudaMemoryPages, OverlappingCopiesMoveAsMemmove) {
  for (const std::ptrdiff_t shift : {-700, -3, -1, 1, 5, 999, 1000, -1000, 1500}) {
    Ledger ledger;
    auto pages = make_pages(ledger, std::nullopt);
    std::vector<unsigned char> buffer(4000);
    std::iota(buffer.begin(), buffer.end(), static_cast<unsigned char>(0));
    std::vector<unsigned char> expected = buffer;
    const std::size_t from = 1500;
    const std::size_t bytes = 1000;
    const auto to = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(from) + shift);
    std::memmove(expected.data() + to, expected.data() + from, bytes);
    pages->copy(buffer.data() + to, buffer.data() + from, bytes);
    EXPECT_EQ(buffer, expected) << "shift " << shift;
    EXPECT_GE(ledger.disjoint_copies, 1U);
  }
}

TEST(CudaMemoryPages, TheExpandableArenaRunsOnThePagesUnchanged) {
  Ledger ledger;
  auto pages = make_pages(ledger, 64 * kPage);
  {
    memory::ArenaOptions options;
    options.limit_bytes = 32 * kPage;
    options.release_threshold = 0;
    options.release_decay_events = 0;
    memory::ExpandableArena arena(*pages, options);
    std::vector<std::pair<void*, std::size_t>> blocks;
    for (const std::size_t bytes : {std::size_t{1000}, 3 * kPage + 17, kPage, std::size_t{65536}, 5 * kPage}) {
      blocks.emplace_back(arena.allocate(bytes), bytes);
    }
    EXPECT_GE(pages->committed_bytes(), 9 * kPage);
    EXPECT_EQ(pages->committed_bytes(), ledger.live.size() * kPage);
    EXPECT_THROW(static_cast<void>(arena.allocate(40 * kPage)), OutOfMemoryError);  // above the arena's budget
    for (const auto& [ptr, bytes] : blocks) arena.deallocate(ptr, bytes);
    static_cast<void>(arena.trim());
    EXPECT_EQ(pages->committed_bytes(), ledger.live.size() * kPage);
  }
  EXPECT_EQ(pages->committed_bytes(), 0U);
  EXPECT_TRUE(ledger.live.empty());
  EXPECT_TRUE(ledger.at.empty());
}

TEST(CudaMemoryPages, ACudaStackOverThePagesReportsTheDeviceInItsOutOfMemoryError) {
  Ledger ledger;
  ledger.create_refused_after = 4;  // the device has 4 pages although the budget allows 16
  memory::MemoryConfig config;
  config.device = "cuda:0";
  config.allocator = memory::AllocatorKind::expandable;
  config.policy = memory::GrowthPolicy::grow;
  config.limit_bytes = 16 * kPage;
  auto stack = memory::make_memory_stack(config, nullptr, make_pages(ledger, 16 * kPage), 16 * kPage);
  void* small = stack->allocate(kPage);
  try {
    static_cast<void>(stack->allocate(6 * kPage));
    FAIL() << "the device's refusal did not surface";
  } catch (const OutOfMemoryError& error) {
    // The arena turns the page source's refusal into its own report (the largest live tensors included).
    EXPECT_EQ(error.report().device, "cuda:0");
    EXPECT_EQ(error.report().requested_bytes, 6 * kPage);
    EXPECT_FALSE(error.report().largest_live.empty());
  }
  EXPECT_EQ(ledger.live.size() * kPage, stack->stats().bytes_reserved) << "the refused request left pages behind";
  void* again = stack->allocate(2 * kPage);  // still usable: the pages it has serve smaller requests
  stack->deallocate(again, 2 * kPage);
  stack->deallocate(small, kPage);
  EXPECT_EQ(stack->stats().bytes_in_use, 0U);
}

}  // namespace
}  // namespace tp::backend::cuda

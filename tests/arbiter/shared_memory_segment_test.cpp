// SPDX-License-Identifier: Apache-2.0
// SharedMemoryArbiter within one process: the segment's checks (mode 0600 whatever the umask, owner, layout
// version, budget, names), creation races and half-created segments, the slot limit, the destructor's
// unregistration, a recycled pid (forged in the raw table), and QuotaAdaptors sharing a device through a
// segment. The cross-process cases are in shared_memory_arbiter_test.cpp.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "arbiter/shared_arbiter_layout.hpp"
#include "tensorpool/arbiter/quota_adaptor.hpp"
#include "tensorpool/arbiter/shared_memory_arbiter.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::arbiter {
namespace {

constexpr std::size_t kBudget = 10 * kMiB;

std::string unique_segment() {
  static std::atomic<int> counter{0};
  return "/tensorpool-segment-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// A unique segment name, unlinked when the test ends.
struct Segment {
  Segment() : name(unique_segment()) { SharedMemoryArbiter::remove(name); }
  ~Segment() { SharedMemoryArbiter::remove(name); }
  std::string name;
};

// The raw table, mapped by the test to inspect or forge states.
class RawTable {
 public:
  explicit RawTable(const std::string& name) {
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    void* address = ::mmap(nullptr, sizeof(detail::SharedTable), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    EXPECT_NE(address, MAP_FAILED);
    table_ = static_cast<detail::SharedTable*>(address);
  }
  ~RawTable() { ::munmap(table_, sizeof(detail::SharedTable)); }
  RawTable(const RawTable&) = delete;
  RawTable& operator=(const RawTable&) = delete;
  detail::SharedTable* operator->() const { return table_; }

 private:
  detail::SharedTable* table_ = nullptr;
};

TEST(SharedMemorySegment, RecycledPidIsReclaimed) {
  Segment segment;
  SharedMemoryArbiter arbiter(segment.name, kBudget);
  const ClientId client = arbiter.register_client("mine", 4 * kMiB);
  ASSERT_TRUE(arbiter.try_reserve(client, 4 * kMiB));
  RawTable raw(segment.name);
  // Forge a slot of pid 1 (alive) with another start time: a pid that was recycled since it registered.
  detail::SharedSlot& forged = raw->slots[client.slot + 1];
  forged.pid = 1;
  forged.start_time = ~std::uint64_t{0} - 1;
  forged.generation = 424242;
  forged.quota = kMiB;
  forged.reserved = kMiB;
  std::strcpy(forged.name, "ghost");
  forged.in_use = 1;
  EXPECT_EQ(arbiter.reclaim_dead_clients(), 1u);
  EXPECT_EQ(arbiter.reserved_bytes(), 4 * kMiB);

  // Our own slot with another start time: a dead process whose pid we inherited.
  raw->slots[client.slot].start_time += 1;
  EXPECT_EQ(arbiter.reserved_bytes(), 0u);
  EXPECT_THROW((void)arbiter.try_reserve(client, 1), InvalidArgument);
  EXPECT_TRUE(arbiter.clients().empty());
}

TEST(SharedMemorySegment, SegmentIsOwnerOnlyWhateverTheUmask) {
  Segment segment;
  const mode_t previous = ::umask(0);
  SharedMemoryArbiter arbiter(segment.name, kBudget);
  ::umask(previous);
  const int fd = ::shm_open(segment.name.c_str(), O_RDONLY, 0);
  ASSERT_GE(fd, 0);
  struct stat info {};
  ASSERT_EQ(::fstat(fd, &info), 0);
  ::close(fd);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(info.st_uid, ::geteuid());
  EXPECT_EQ(static_cast<std::size_t>(info.st_size), sizeof(detail::SharedTable));
}

TEST(SharedMemorySegment, RefusesSegmentsItCannotTrust) {
  Segment segment;
  { SharedMemoryArbiter creator(segment.name, kBudget); }
  const auto expect_refusal = [&](std::size_t budget, const std::string& needle) {
    try {
      SharedMemoryArbiter opener(segment.name, budget);
      ADD_FAILURE() << "opened a segment it should refuse (" << needle << ")";
    } catch (const DeviceError& error) {
      const std::string text = error.what();
      EXPECT_NE(text.find(segment.name), std::string::npos) << text;
      EXPECT_NE(text.find(needle), std::string::npos) << text;
      EXPECT_NE(text.find("SharedMemoryArbiter::remove"), std::string::npos) << text;
    }
  };
  expect_refusal(kBudget + 1, "created with a budget of 10.00 MiB");

  {
    RawTable raw(segment.name);
    raw->header.layout_version = 99;
  }
  expect_refusal(kBudget, "layout version 99");
  { RawTable(segment.name)->header.layout_version = detail::kLayoutVersion; }

  const int fd = ::shm_open(segment.name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fchmod(fd, 0644), 0);
  expect_refusal(kBudget, "mode 0644");
  ASSERT_EQ(::fchmod(fd, 0600), 0);
  if (::geteuid() == 0) {
    ASSERT_EQ(::fchown(fd, 12345, static_cast<gid_t>(-1)), 0);
    expect_refusal(kBudget, "owned by uid 12345");
    ASSERT_EQ(::fchown(fd, 0, static_cast<gid_t>(-1)), 0);
  }
  ::close(fd);
  EXPECT_NO_THROW(SharedMemoryArbiter(segment.name, kBudget)) << "usable again once restored";
}

TEST(SharedMemorySegment, OpenersStartingAtOnceAgreeOnOneTable) {
  Segment segment;
  constexpr int kOpeners = 6;
  std::vector<std::unique_ptr<SharedMemoryArbiter>> arbiters(kOpeners);
  std::vector<std::thread> threads;
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([&, i] {
      arbiters[i] = std::make_unique<SharedMemoryArbiter>(segment.name, kBudget);
      EXPECT_TRUE(arbiters[i]->register_client("opener-" + std::to_string(i), kMiB).valid());
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const auto& arbiter : arbiters) EXPECT_EQ(arbiter->clients().size(), std::size_t{kOpeners});
}

TEST(SharedMemorySegment, SegmentWhoseCreatorDiedBeforeInitialisingIsInitialised) {
  Segment segment;
  const int fd = ::shm_open(segment.name.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, sizeof(detail::SharedTable)), 0);  // sized, but magic never written
  ::close(fd);
  SharedMemoryArbiter arbiter(segment.name, kBudget);
  const ClientId client = arbiter.register_client("a", kBudget);
  EXPECT_TRUE(arbiter.try_reserve(client, kBudget));
}

TEST(SharedMemorySegment, RejectsBadNamesAndRunsOutOfSlotsClearly) {
  EXPECT_THROW(SharedMemoryArbiter("", kBudget), InvalidArgument);
  EXPECT_THROW(SharedMemoryArbiter("no-slash", kBudget), InvalidArgument);
  EXPECT_THROW(SharedMemoryArbiter("/a/b", kBudget), InvalidArgument);
  EXPECT_FALSE(SharedMemoryArbiter::remove(unique_segment()));

  Segment segment;
  SharedMemoryArbiter arbiter(segment.name, kBudget);
  EXPECT_THROW((void)arbiter.register_client(std::string(SharedMemoryArbiter::kMaxNameLength + 1, 'x'), kMiB),
               InvalidArgument);
  for (std::size_t i = 0; i < SharedMemoryArbiter::kMaxClients; ++i) {
    EXPECT_TRUE(arbiter.register_client(std::string(SharedMemoryArbiter::kMaxNameLength, 'a'), kMiB).valid());
  }
  EXPECT_THROW((void)arbiter.register_client("one-more", kMiB), DeviceError);
}

TEST(SharedMemorySegment, DestructorUnregistersItsClients) {
  Segment segment;
  SharedMemoryArbiter observer(segment.name, kBudget);
  {
    SharedMemoryArbiter user(segment.name, kBudget);
    const ClientId client = user.register_client("user", kBudget);
    ASSERT_TRUE(user.try_reserve(client, kBudget));
    EXPECT_EQ(observer.reserved_bytes(), kBudget);
  }
  EXPECT_EQ(observer.reserved_bytes(), 0u);
  EXPECT_TRUE(observer.clients().empty());
}

TEST(SharedMemorySegment, QuotaAdaptorsShareADeviceThroughTheSegment) {
  Segment segment;
  SharedMemoryArbiter arbiter(segment.name, 8 * kMiB);
  memory::MemoryConfig config;
  config.device = "sim:0";
  config.limit_bytes = 32 * kMiB;
  auto device = memory::make_sim_device_memory_stack(config, 64 * kMiB);
  QuotaAdaptor a(*device, arbiter, "session-a", 6 * kMiB);
  QuotaAdaptor b(*device, arbiter, "session-b", 6 * kMiB);
  void* first = a.allocate(6 * kMiB);
  try {
    (void)b.allocate(4 * kMiB);
    ADD_FAILURE() << "the shared budget was exceeded";
  } catch (const OutOfMemoryError& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("session-b"), std::string::npos) << text;
    EXPECT_NE(text.find(segment.name), std::string::npos) << text;
  }
  void* second = b.allocate(2 * kMiB);
  EXPECT_EQ(arbiter.reserved_bytes(), 8 * kMiB);
  a.deallocate(first, 6 * kMiB);
  b.deallocate(second, 2 * kMiB);
  EXPECT_EQ(arbiter.reserved_bytes(), 0u);
}

}  // namespace
}  // namespace tp::arbiter

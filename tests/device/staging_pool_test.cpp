// SPDX-License-Identifier: Apache-2.0
// StagingPool: kind() says what stages copies ("mlock", a device's own upstream, or "pageable"); a device's
// own upstream serves the blocks through the BFC stack above it; when that upstream refuses, the pool says so
// and stages through pageable memory from then on (blocks still work, pinned() and kind() say so); and a pool
// asked for an upstream without a kind or a factory is an InvalidArgument naming the fix.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#include "device/staging_pool.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/host_resource.hpp"

namespace tp::device {
namespace {

// Pageable host memory that counts its calls, or refuses every request (as a driver out of pinned memory).
class CountingUpstream final : public memory::MemoryResource {
 public:
  CountingUpstream(std::atomic<int>& allocations, bool refuse)
      : MemoryResource("counting"), allocations_(allocations), refuse_(refuse) {}

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const memory::AllocationTag& tag) override {
    if (refuse_) TP_THROW(DeviceError, "test", "the driver refuses pinned memory");
    allocations_.fetch_add(1);
    return host_.allocate(bytes, alignment, tag);
  }
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override { host_.deallocate(ptr, bytes); }
  memory::MemoryStats do_stats() const override { return host_.stats(); }

  memory::HostResource host_;
  std::atomic<int>& allocations_;
  const bool refuse_;
};

std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "";
}

TEST(StagingPool, KindSaysWhatStagesCopies) {
  EXPECT_EQ(StagingPool::create("test", false)->kind(), "pageable");
  EXPECT_FALSE(StagingPool::create("test", false)->pinned());
  const auto pinned = StagingPool::create("test", true);
  EXPECT_EQ(pinned->kind(), pinned->pinned() ? "mlock" : "pageable");
}

TEST(StagingPool, ADevicesOwnUpstreamServesTheBlocksThroughTheStack) {
  std::atomic<int> allocations{0};
  const auto pool = StagingPool::create("test", "custom pinned",
                                        [&] { return std::make_unique<CountingUpstream>(allocations, false); });
  EXPECT_TRUE(pool->pinned());
  EXPECT_EQ(pool->kind(), "custom pinned");
  for (int i = 0; i < 50; ++i) {
    const std::shared_ptr<void> block = pool->acquire(1000);
    std::memset(block.get(), i, 1000);
  }
  EXPECT_EQ(allocations.load(), 1) << "the BFC stack above keeps one region for every block";
  EXPECT_EQ(pool->stats().num_allocs, 50u);
  EXPECT_EQ(pool->kind(), "custom pinned");
}

TEST(StagingPool, ARefusingUpstreamFallsBackToPageableMemory) {
  std::atomic<int> allocations{0};
  const auto pool = StagingPool::create("test", "custom pinned",
                                        [&] { return std::make_unique<CountingUpstream>(allocations, true); });
  EXPECT_TRUE(pool->pinned());
  testing::internal::CaptureStderr();
  const std::shared_ptr<void> block = pool->acquire(4096);
  const std::string said = testing::internal::GetCapturedStderr();
  ASSERT_NE(block, nullptr);
  std::memset(block.get(), 7, 4096);
  EXPECT_FALSE(pool->pinned());
  EXPECT_EQ(pool->kind(), "pageable");
  EXPECT_NE(said.find("pinned staging memory refused"), std::string::npos) << said;
  EXPECT_NE(said.find("the driver refuses pinned memory"), std::string::npos) << said;
  EXPECT_NE(said.find("staging copies through pageable memory"), std::string::npos) << said;
  testing::internal::CaptureStderr();
  const std::shared_ptr<void> second = pool->acquire(4096);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "the fallback is said once";
}

TEST(StagingPool, AnUpstreamWithoutAKindOrAFactoryIsRefused) {
  const std::string no_kind =
      message_of([] { StagingPool::create("opencl:0", "", [] { return std::make_unique<memory::HostResource>(); }); });
  EXPECT_NE(no_kind.find("opencl:0"), std::string::npos) << no_kind;
  EXPECT_NE(no_kind.find("give both"), std::string::npos) << no_kind;
  EXPECT_NE(message_of([] { StagingPool::create("opencl:0", "kind", StagingPool::UpstreamFactory{}); }), "");
  const std::string null_upstream = message_of(
      [] { StagingPool::create("opencl:0", "kind", [] { return std::unique_ptr<memory::MemoryResource>(); }); });
  EXPECT_NE(null_upstream.find("returned null"), std::string::npos) << null_upstream;
}

}  // namespace
}  // namespace tp::device

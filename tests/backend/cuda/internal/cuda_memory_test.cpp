// SPDX-License-Identifier: Apache-2.0
// The CUDA memory sources on a GPU: each allocator kind allocates usable memory and frees it, the stack's
// stats match what the driver reports (cudaMemGetInfo deltas within a page; the pool's attributes), a refusal
// for lack of memory is a tp::OutOfMemoryError that leaves the device usable, and managed memory runs with a
// small budget below the free memory. Every test reports SKIPPED ("no CUDA device") without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_memory.hpp"
#include "backend/cuda/cuda_memory_sources.hpp"
#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::backend::cuda {
namespace {

using memory::AllocatorKind;
using memory::GrowthPolicy;
using memory::MemoryConfig;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kPage = 2 * kMiB;  // the driver's page: cudaMemGetInfo moves in these

MemoryConfig config_for(AllocatorKind kind, std::size_t limit, GrowthPolicy policy = GrowthPolicy::grow) {
  MemoryConfig config;
  config.device = "cuda:0";
  config.allocator = kind;
  config.policy = policy;
  config.limit_bytes = limit;
  config.thread_cache_bytes = 0;  // stats then count every block the test holds
  return config;
}

std::size_t driver_used() {
  const DriverMemoryInfo info = driver_memory_info(0);
  return info.total_bytes - info.free_bytes;
}

// Writes `bytes` of `value` on the device and reads them back, so the memory is known usable.
void expect_usable(void* ptr, std::size_t bytes, unsigned char value) {
  ASSERT_EQ(cudaMemset(ptr, value, bytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned char> back(std::min<std::size_t>(bytes, 4096));
  ASSERT_EQ(cudaMemcpy(back.data(), static_cast<char*>(ptr) + (bytes - back.size()), back.size(), cudaMemcpyDefault),
            cudaSuccess);
  for (const unsigned char byte : back) ASSERT_EQ(byte, value);
}

class CudaMemorySources : public ::testing::TestWithParam<AllocatorKind> {};

TEST_P(CudaMemorySources, AllocateUseAndFreeWithStatsBackToZero) {
  TP_REQUIRE_CUDA();
  const DriverMemoryInfo info = driver_memory_info(0);
  auto stack = make_cuda_memory_stack(config_for(GetParam(), 64 * kMiB), info.total_bytes, 0);
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (const std::size_t bytes : {std::size_t{256}, std::size_t{1000}, 3 * kMiB + 5, 8 * kMiB, kPage}) {
    void* ptr = stack->allocate(bytes);
    ASSERT_NE(ptr, nullptr);
    expect_usable(ptr, bytes, static_cast<unsigned char>(bytes & 0xffU));
    blocks.emplace_back(ptr, bytes);
  }
  EXPECT_GE(stack->stats().bytes_in_use, 3 * kMiB + 8 * kMiB + kPage);
  for (const auto& [ptr, bytes] : blocks) stack->deallocate(ptr, bytes);
  const memory::MemoryStats stats = stack->stats();
  EXPECT_EQ(stats.bytes_in_use, 0U);
  EXPECT_EQ(stats.bytes_requested, 0U);
  EXPECT_EQ(stats.num_allocs, 5U);
  EXPECT_EQ(stats.num_frees, 5U);
}

TEST_P(CudaMemorySources, ReservedBytesMatchTheDriversView) {
  TP_REQUIRE_CUDA();
  if (GetParam() == AllocatorKind::managed) GTEST_SKIP() << "managed pages are not resident until touched";
  const DriverMemoryInfo info = driver_memory_info(0);
  auto stack = make_cuda_memory_stack(config_for(GetParam(), 256 * kMiB), info.total_bytes, 0);
  void* warm = stack->allocate(kMiB);  // the context and the source's first call are not the test's subject
  expect_usable(warm, kMiB, 1);
  stack->deallocate(warm, kMiB);
  static_cast<void>(stack->trim());
  const std::size_t before = driver_used();
  void* ptr = stack->allocate(100 * kMiB);
  // Measured before the memory is used: a first kernel (cudaMemset's) may load code into device memory.
  const std::size_t reserved = stack->stats().bytes_reserved;
  const std::size_t driver_delta = driver_used() - before;
  expect_usable(ptr, 100 * kMiB, 7);
  EXPECT_GE(reserved, 100 * kMiB);
  // The driver counts whole pages: its delta is our reserved bytes rounded up to them, no more.
  EXPECT_GE(driver_delta + kPage, reserved) << "reserved " << reserved << ", driver delta " << driver_delta;
  EXPECT_LE(driver_delta, memory::round_up(reserved, kPage) + kPage)
      << "reserved " << reserved << ", driver delta " << driver_delta;
  stack->deallocate(ptr, 100 * kMiB);
  static_cast<void>(stack->trim());
  EXPECT_LE(driver_used(), before + kPage) << "memory not given back to the driver by trim";
}

INSTANTIATE_TEST_SUITE_P(EveryKind, CudaMemorySources,
                         ::testing::Values(AllocatorKind::bfc, AllocatorKind::system, AllocatorKind::expandable,
                                           AllocatorKind::cuda_malloc_async, AllocatorKind::managed),
                         [](const ::testing::TestParamInfo<AllocatorKind>& param_info) {
                           return std::string(memory::to_string(param_info.param));
                         });

TEST(CudaMemory, ThePoolsStatsAreItsAttributes) {
  TP_REQUIRE_CUDA();
  CudaAsyncPoolResource pool(0, 256 * kMiB, GrowthPolicy::preallocate, "cuda:0");
  void* a = pool.allocate(10 * kMiB);
  void* b = pool.allocate(kMiB);
  const auto attributes = pool.attributes();
  const memory::MemoryStats stats = pool.stats();
  EXPECT_EQ(stats.bytes_reserved, attributes.reserved_current);
  EXPECT_EQ(stats.bytes_in_use, attributes.used_current);
  EXPECT_GE(attributes.used_current, 11 * kMiB);
  EXPECT_EQ(attributes.release_threshold, 256 * kMiB);
  pool.deallocate(a, 10 * kMiB);
  pool.deallocate(b, kMiB);
  EXPECT_EQ(pool.stats().bytes_in_use, 0U);
  EXPECT_EQ(pool.stats().peak_bytes_in_use, attributes.used_high);
}

TEST(CudaMemory, TheDevicesRefusalIsAnOutOfMemoryErrorAndTheDeviceStaysUsable) {
  TP_REQUIRE_CUDA();
  const DriverMemoryInfo info = driver_memory_info(0);
  for (const AllocatorKind kind : {AllocatorKind::system, AllocatorKind::cuda_malloc_async}) {
    // The budget is the whole GPU, more than it has free (the context takes some): the driver refuses.
    auto stack = make_cuda_memory_stack(config_for(kind, info.total_bytes), info.total_bytes, 0);
    try {
      static_cast<void>(stack->allocate(info.total_bytes - kMiB));
      ADD_FAILURE() << memory::to_string(kind) << ": the GPU served more than it has free";
    } catch (const OutOfMemoryError& error) {
      EXPECT_EQ(error.report().device, "cuda:0");
      EXPECT_NE(std::string(error.what()).find("refused"), std::string::npos) << error.what();
    }
    void* ptr = stack->allocate(kMiB);
    expect_usable(ptr, kMiB, 3);
    stack->deallocate(ptr, kMiB);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the refusal left a CUDA error behind";
  }
}

TEST(CudaMemory, ManagedMemoryWithASmallBudgetIsReachableFromHostAndDevice) {
  TP_REQUIRE_CUDA();
  const DriverMemoryInfo info = driver_memory_info(0);
  auto stack = make_cuda_memory_stack(config_for(AllocatorKind::managed, 8 * kMiB), info.total_bytes, 0);
  const std::size_t bytes = 4 * kMiB;
  auto* data = static_cast<unsigned char*>(stack->allocate(bytes));
  std::memset(data, 1, bytes);  // the host writes managed memory in place
  advise_preferred_location(data, bytes, 0);
  prefetch(data, bytes, 0, nullptr);
  expect_usable(data, bytes, 9);
  EXPECT_EQ(data[bytes - 1], 9);                                                 // and reads what the device wrote
  EXPECT_THROW(static_cast<void>(stack->allocate(8 * kMiB)), OutOfMemoryError);  // the budget is a wall
  stack->deallocate(data, bytes);

  // A managed budget above the free memory is refused unless oversubscription is asked for.
  EXPECT_THROW(static_cast<void>(
                   make_cuda_memory_stack(config_for(AllocatorKind::managed, info.total_bytes), info.total_bytes, 0)),
               InvalidArgument);
}

TEST(CudaMemory, PinnedHostMemoryCopiesBothWays) {
  TP_REQUIRE_CUDA();
  auto pinned = make_cuda_pinned_host_resource();
  auto* host = static_cast<unsigned char*>(pinned->allocate(kMiB));
  std::memset(host, 5, kMiB);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, kMiB), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, host, kMiB, cudaMemcpyHostToDevice), cudaSuccess);
  std::memset(host, 0, kMiB);
  ASSERT_EQ(cudaMemcpy(host, device, kMiB, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host[kMiB - 1], 5);
  ASSERT_EQ(cudaFree(device), cudaSuccess);
  EXPECT_EQ(pinned->stats().bytes_in_use, kMiB);
  pinned->deallocate(host, kMiB);
  EXPECT_EQ(pinned->stats().bytes_in_use, 0U);
}

TEST(CudaMemory, ExpandableCompactionCopiesOverlappingBlocksOnTheDevice) {
  TP_REQUIRE_CUDA();
  if (!virtual_memory_supported(0)) GTEST_SKIP() << "cuda:0 has no virtual memory management";
  PagedVirtualMemory pages(make_cuda_page_driver(0), "cuda:0", std::nullopt);
  void* base = pages.reserve(4 * pages.granularity());
  pages.commit(base, 4 * pages.granularity());
  auto* bytes = static_cast<unsigned char*>(base);
  std::vector<unsigned char> pattern(3 * kMiB);
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned char>(i * 7);
  ASSERT_EQ(cudaMemcpy(bytes + kMiB, pattern.data(), pattern.size(), cudaMemcpyHostToDevice), cudaSuccess);
  pages.copy(bytes, bytes + kMiB, pattern.size());  // moves down by 1 MiB over itself
  std::vector<unsigned char> back(pattern.size());
  ASSERT_EQ(cudaMemcpy(back.data(), bytes, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, pattern);
  pages.decommit(base, 4 * pages.granularity());
  pages.unreserve(base, 4 * pages.granularity());
  EXPECT_EQ(pages.committed_bytes(), 0U);
}

}  // namespace
}  // namespace tp::backend::cuda

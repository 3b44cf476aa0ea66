// SPDX-License-Identifier: Apache-2.0
// Device::compact: on an expandable sim device the listed buffers move down over the holes other buffers left,
// keep their bytes, and give back the granules the holes pinned; unlisted buffers stay; BFC moves nothing; a
// foreign buffer or a call from one of the device's own tasks is refused by name.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::device {
namespace {

constexpr std::size_t kBlockBytes = 1536 * kKiB;  // blocks straddle the 2 MiB granules

std::unique_ptr<Device> make(memory::AllocatorKind allocator, int index = 0) {
  memory::MemoryConfig config = testing::grow_config("sim", 16 * kMiB);
  config.allocator = allocator;
  return make_sim_device({DeviceKind::sim, index}, {DeviceKind::sim, index}, 64 * kMiB, config, {});
}

std::vector<std::uint8_t> pattern(std::size_t seed) {
  std::vector<std::uint8_t> bytes(kBlockBytes);
  std::iota(bytes.begin(), bytes.end(), static_cast<std::uint8_t>(seed * 37));
  return bytes;
}

std::vector<std::uint8_t> contents(Device& device, const std::shared_ptr<Buffer>& buffer) {
  std::vector<std::uint8_t> bytes(buffer->bytes());
  device.copy_to_host(device.stream(), buffer, 0, bytes.data(), bytes.size());
  return bytes;
}

void* address(Device& device, const std::shared_ptr<Buffer>& buffer) {
  return testing::run_on(device.stream(), [&buffer] { return buffer->data(); });
}

// Four kept buffers interleaved with four freed ones: each of the six granules keeps a piece of a kept one.
std::vector<std::shared_ptr<Buffer>> fragment(Device& device) {
  std::vector<std::shared_ptr<Buffer>> kept;
  std::vector<std::shared_ptr<Buffer>> freed;
  for (std::size_t index = 0; index < 4; ++index) {
    kept.push_back(device.allocate(kBlockBytes, {"kept" + std::to_string(index)}));
    freed.push_back(device.allocate(kBlockBytes, {"freed" + std::to_string(index)}));
    const std::vector<std::uint8_t> bytes = pattern(index);
    device.copy_from_host(device.stream(), bytes.data(), kept.back(), 0, bytes.size());
  }
  device.synchronize();
  return kept;
}

TEST(DeviceCompaction, ListedBuffersMoveDownKeepTheirBytesAndGiveGranulesBack) {
  const std::unique_ptr<Device> device = make(memory::AllocatorKind::expandable);
  const std::vector<std::shared_ptr<Buffer>> kept = fragment(*device);
  ASSERT_EQ(device->memory().stats().bytes_reserved, 12 * kMiB);
  std::vector<void*> before;
  for (const auto& buffer : kept) before.push_back(address(*device, buffer));

  const memory::CompactionResult result = device->compact(kept);
  EXPECT_TRUE(result.ran);
  EXPECT_GT(result.blocks_moved, 0u);
  EXPECT_GT(result.granules_freed, 0u);
  EXPECT_LT(device->memory().stats().bytes_reserved, 12 * kMiB);
  std::size_t moved = 0;
  for (std::size_t index = 0; index < kept.size(); ++index) {
    EXPECT_EQ(contents(*device, kept[index]), pattern(index)) << index;
    if (address(*device, kept[index]) != before[index]) ++moved;
  }
  EXPECT_EQ(moved, result.blocks_moved);
  // The stack's records followed: every live allocation is a kept buffer at its new address.
  std::vector<void*> live;
  for (const memory::TrackedAllocation& allocation : device->memory().tracking()->live_allocations()) {
    live.push_back(allocation.ptr);
  }
  std::vector<void*> now;
  for (const auto& buffer : kept) now.push_back(address(*device, buffer));
  std::sort(live.begin(), live.end());
  std::sort(now.begin(), now.end());
  EXPECT_EQ(live, now);
}

TEST(DeviceCompaction, BuffersNotListedStayWhereTheyAre) {
  const std::unique_ptr<Device> device = make(memory::AllocatorKind::expandable);
  const std::vector<std::shared_ptr<Buffer>> kept = fragment(*device);
  std::vector<void*> before;
  for (const auto& buffer : kept) before.push_back(address(*device, buffer));
  const std::vector<std::shared_ptr<Buffer>> listed = {kept[0], kept[1]};
  (void)device->compact(listed);
  EXPECT_EQ(address(*device, kept[2]), before[2]);
  EXPECT_EQ(address(*device, kept[3]), before[3]);
  for (std::size_t index = 0; index < kept.size(); ++index) EXPECT_EQ(contents(*device, kept[index]), pattern(index));
}

TEST(DeviceCompaction, BfcMovesNothing) {
  const std::unique_ptr<Device> device = make(memory::AllocatorKind::bfc);
  const std::vector<std::shared_ptr<Buffer>> kept = fragment(*device);
  std::vector<void*> before;
  for (const auto& buffer : kept) before.push_back(address(*device, buffer));
  const memory::CompactionResult result = device->compact(kept);
  EXPECT_FALSE(result.ran);
  EXPECT_EQ(result.blocks_moved, 0u);
  for (std::size_t index = 0; index < kept.size(); ++index) EXPECT_EQ(address(*device, kept[index]), before[index]);
}

TEST(DeviceCompaction, ABufferOfAnotherDeviceIsRefusedByName) {
  const std::unique_ptr<Device> device = make(memory::AllocatorKind::expandable);
  const std::unique_ptr<Device> other = make(memory::AllocatorKind::expandable, 1);
  const std::vector<std::shared_ptr<Buffer>> foreign = {other->allocate(kKiB, {"elsewhere"})};
  try {
    (void)device->compact(foreign);
    FAIL() << "a buffer of sim:1 was accepted by sim:0";
  } catch (const InvalidArgument& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("sim:1"), std::string::npos) << what;
    EXPECT_NE(what.find("elsewhere"), std::string::npos) << what;
  }
}

TEST(DeviceCompaction, ACallFromTheDevicesOwnTaskIsRefused) {
  const std::unique_ptr<Device> device = make(memory::AllocatorKind::expandable);
  const std::vector<std::shared_ptr<Buffer>> kept = fragment(*device);
  device->stream().enqueue([&device, &kept] { (void)device->compact(kept); });
  try {
    device->stream().synchronize();
    FAIL() << "compact() ran inside a task of the device's own stream";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("host code between steps"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace tp::device

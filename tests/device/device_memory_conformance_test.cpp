// SPDX-License-Identifier: Apache-2.0
// The memory stack's contract as a device's users meet it, on every backend present (cpu, sim, opencl where
// an OpenCL device exists) and every allocator and growth policy the backend takes: stats that add up, the
// budget (limit_bytes) as a hard wall, an out-of-memory report naming the device, the request's tag and the
// largest live tensors, a device that stays usable after it with its buffers intact, reset_peak, and trim
// giving cached memory back. Buffers are written and read only through copies, so device memory that host
// code cannot touch (opencl) is checked the same way as host-addressable memory. (tests/memory/ checks the
// same contract on the memory resources themselves; the OpenCL source's own cases are in tests/backend/opencl/.)
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"

namespace tp::device {
namespace {

using memory::AllocationKind;
using memory::AllocationTag;
using memory::AllocatorKind;
using memory::GrowthPolicy;
using testing::Backend;

using Param = std::tuple<Backend, AllocatorKind, GrowthPolicy>;

constexpr std::size_t kCapacity = 64 * kMiB;
constexpr std::size_t kBudget = 16 * kMiB;

AllocationTag tag(std::string name, AllocationKind kind = AllocationKind::activation) {
  AllocationTag result;
  result.name = std::move(name);
  result.op = "Conv2D";
  result.kind = kind;
  return result;
}

class DeviceMemoryConformance : public ::testing::TestWithParam<Param> {
 protected:
  DeviceMemoryConformance() {
    const auto [backend, allocator, policy] = GetParam();
    name_ = std::string(testing::backend_label(backend)) + ":0";
    memory::MemoryConfig config;
    config.device = name_;
    config.allocator = allocator;
    config.policy = policy;
    config.limit_bytes = kBudget;
    config.tracking = true;
    const DeviceId id = parse_device_id(name_, "device");
    if (backend == Backend::cpu) {
      device_ = make_cpu_device(id, id, kCapacity, config, {});
    } else if (backend == Backend::sim) {
      device_ = make_sim_device(id, id, kCapacity, config, {});
    } else {
      device_ = make_opencl_device(id, id, kCapacity, config, {});
    }
  }

  std::vector<unsigned char> read(const std::shared_ptr<Buffer>& buffer) {
    std::vector<unsigned char> bytes(buffer->bytes());
    device_->copy_to_host(device_->stream(), buffer, 0, bytes.data(), bytes.size());
    return bytes;
  }

  std::string name_;
  std::unique_ptr<Device> device_;
};

TEST_P(DeviceMemoryConformance, StatsBudgetOutOfMemoryReportResetPeakAndTrim) {
  Device& device = *device_;
  memory::MemoryStack& stack = device.memory();
  EXPECT_EQ(stack.limit_bytes(), kBudget);
  EXPECT_EQ(stack.name(), name_);
  ASSERT_NE(stack.tracking(), nullptr);

  std::vector<std::shared_ptr<Buffer>> held;
  for (std::size_t i = 1; i <= 8; ++i) {
    const std::size_t bytes = i * 100 * kKiB + 7;
    held.push_back(device.allocate(bytes, tag("t" + std::to_string(i))));
    const std::vector<unsigned char> pattern(bytes, static_cast<unsigned char>(i));
    device.copy_from_host(device.stream(), pattern.data(), held.back(), 0, bytes);
  }
  device.synchronize();
  memory::MemoryStats stats = stack.stats();
  EXPECT_EQ(stats.num_allocs, 8u);
  EXPECT_EQ(stats.bytes_requested, 3600 * kKiB + 56);
  EXPECT_GE(stats.bytes_in_use, stats.bytes_requested);
  EXPECT_GE(stats.bytes_reserved, stats.bytes_in_use);
  EXPECT_EQ(stats.largest_alloc, 800 * kKiB + 7);
  ASSERT_TRUE(stats.bytes_limit.has_value());
  EXPECT_LE(*stats.bytes_limit, kBudget);
  EXPECT_EQ(stack.tracking()->live_count(), 8u);
  EXPECT_EQ(device.live_buffers(), 8u);

  // Past the budget (well inside the device's capacity): a real shortage, with the device, the tag and the
  // largest live tensor in the report.
  try {
    (void)device.allocate(15 * kMiB, tag("too_big", AllocationKind::gradient));
    ADD_FAILURE() << "allocated past the budget";
  } catch (const OutOfMemoryError& error) {
    const OutOfMemoryReport& report = error.report();
    EXPECT_EQ(report.device, name_);
    EXPECT_FALSE(report.is_fragmentation());
    const std::string text = error.what();
    EXPECT_NE(text.find("out of memory on " + name_), std::string::npos) << text;
    EXPECT_NE(text.find("too_big"), std::string::npos) << text;
    EXPECT_NE(text.find("real shortage"), std::string::npos) << text;
    ASSERT_FALSE(report.largest_live.empty());
    EXPECT_EQ(report.largest_live.front().tag.name, "t8");
    EXPECT_NE(text.find("t8 (Conv2D, activation)"), std::string::npos) << text;
  }
  EXPECT_EQ(stack.stats().num_ooms, 1u);

  // Still usable after the OOM, and every buffer still holds its bytes.
  {
    const auto after = device.allocate(kMiB, tag("after"));
    EXPECT_EQ(after->bytes(), kMiB);
  }
  device.synchronize();
  for (std::size_t i = 0; i < held.size(); ++i) {
    EXPECT_EQ(read(held[i]), std::vector<unsigned char>(held[i]->bytes(), static_cast<unsigned char>(i + 1)))
        << "t" << i + 1 << " changed";
  }

  stack.reset_peak();
  held.clear();
  device.synchronize();
  stats = stack.stats();
  EXPECT_EQ(stats.bytes_requested, 0u);
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.num_frees, 9u);
  EXPECT_EQ(stats.peak_bytes_requested, 3600 * kKiB + 56) << "the peak restarted at reset_peak";
  EXPECT_EQ(stack.tracking()->live_count(), 0u);
  EXPECT_EQ(device.live_buffers(), 0u);

  stack.trim();
  const auto [backend, allocator, policy] = GetParam();
  if (policy == GrowthPolicy::grow || allocator != AllocatorKind::bfc) {
    EXPECT_EQ(stack.stats().bytes_reserved, 0u) << "trim gives cached memory back";
  }
  const auto again = device.allocate(4 * kMiB, tag("again"));
  const std::vector<unsigned char> fours(4 * kMiB, 4);
  device.copy_from_host(device.stream(), fours.data(), again, 0, fours.size());
  EXPECT_EQ(read(again), fours);
}

std::vector<Param> params() {
  std::vector<Param> result;
  for (const Backend backend : testing::present_backends()) {
    for (const AllocatorKind allocator : {AllocatorKind::bfc, AllocatorKind::expandable, AllocatorKind::system}) {
      // OpenCL cannot map pages into a reserved range: opencl devices refuse the expandable arena
      // (tests/device/opencl_device_test.cpp checks the refusal).
      if (backend == Backend::opencl && allocator == AllocatorKind::expandable) continue;
      for (const GrowthPolicy policy : {GrowthPolicy::preallocate, GrowthPolicy::grow}) {
        result.emplace_back(backend, allocator, policy);
      }
    }
  }
  return result;
}

std::string param_name(const ::testing::TestParamInfo<Param>& param) {
  return std::string(testing::backend_label(std::get<0>(param.param))) + "_" +
         std::string(memory::to_string(std::get<1>(param.param))) +
         (std::get<2>(param.param) == GrowthPolicy::grow ? "_grow" : "_preallocate");
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceMemoryConformance, ::testing::ValuesIn(params()), param_name);

}  // namespace
}  // namespace tp::device

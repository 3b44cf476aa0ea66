// SPDX-License-Identifier: Apache-2.0
// Compaction on a cuda device's expandable arena (the CUDA virtual-memory API): Device::compact moves buffers
// over the holes others left, through the device copy and remapped physical granules, and gives the pinned
// granules back; a session whose step arena cuda:0 refuses compacts its variables, and its kernels then read
// them at their new addresses. Sizes follow the arena's granularity (cuMemGetAllocationGranularity on cuda).
// The cuda cases are skipped, saying why, without a GPU; the same cases on an expandable sim:0 run everywhere,
// so the cases themselves are checked where no GPU is.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/graph/builder.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/runtime/session.hpp"

namespace tp::backend::cuda {
namespace {

using testing::make_manager;
using testing::pattern;

constexpr int kKept = 4;
constexpr std::size_t kSimGranule = std::size_t{2} << 20;

// `device` ("cuda:0" or "sim:0") with the expandable arena and a limit of eight granules of `granule` bytes.
std::unique_ptr<device::DeviceManager> expandable_manager(const std::string& device, std::size_t granule) {
  device::DeviceManagerOptions options = testing::cuda_options();
  if (device == "sim:0") options.sim_devices = 1;
  memory::MemoryConfig config;
  config.allocator = memory::AllocatorKind::expandable;
  config.limit_bytes = 8 * granule;
  options.memory_configs[device::parse_device_id(device, "device")] = config;
  return make_manager(std::move(options));
}

// The granule of cuda:0's arena.
std::size_t cuda_granularity() {
  const auto probe = expandable_manager("cuda:0", kSimGranule);
  const auto* arena = dynamic_cast<const memory::ExpandableArena*>(&probe->device("cuda:0").memory().allocator());
  return arena != nullptr ? arena->granularity() : 0;
}

void listed_buffers_move(const std::string& name, std::size_t granule) {
  const auto manager = expandable_manager(name, granule);
  device::Device& device = manager->device(name);
  const std::size_t block = granule / 4 * 3;  // blocks straddle granules
  std::vector<std::shared_ptr<Buffer>> kept;
  std::vector<std::shared_ptr<Buffer>> freed;  // the holes between kept buffers, once they go
  for (int index = 0; index < kKept; ++index) {
    kept.push_back(device.allocate(block, {"kept" + std::to_string(index)}));
    freed.push_back(device.allocate(block, {"freed"}));
    const std::vector<std::uint8_t> bytes = pattern(block, static_cast<std::uint32_t>(index));
    device.copy_from_host(device.stream(), bytes.data(), kept.back(), 0, bytes.size());
  }
  device.synchronize();
  freed.clear();
  const std::size_t reserved = device.memory().stats().bytes_reserved;
  ASSERT_EQ(reserved, 6 * granule) << "each granule keeps a piece of a kept buffer";

  const memory::CompactionResult result = device.compact(kept);
  EXPECT_TRUE(result.ran);
  EXPECT_GT(result.blocks_moved, 0U);
  EXPECT_GT(result.granules_freed, 0U);
  EXPECT_LT(device.memory().stats().bytes_reserved, reserved);
  for (int index = 0; index < kKept; ++index) {
    std::vector<std::uint8_t> back(block);
    device.copy_to_host(device.stream(), kept[static_cast<std::size_t>(index)], 0, back.data(), back.size());
    EXPECT_EQ(back, pattern(block, static_cast<std::uint32_t>(index))) << index;
  }
  EXPECT_EQ(device.memory().tracking()->live_count(), static_cast<std::size_t>(kKept));
}

// Variables `prefix`0..3 of three quarters of a granule each; sum = x + every variable; twice = big + big.
graph::Graph variables_graph(const std::string& prefix, const std::string& device, std::int64_t elements) {
  graph::Graph g;
  auto on = [&g, &device](graph::Output output) {
    g.mutable_node(output.node).device = device;
    return output;
  };
  std::vector<graph::Output> variables;
  for (int index = 0; index < kKept; ++index) {
    variables.push_back(on(graph::variable(g, prefix + std::to_string(index), DType::f32, {elements})));
    g.mutable_node(variables.back().node).attributes["initializer"] = std::string("uniform");
    g.mutable_node(variables.back().node).attributes["seed"] = std::int64_t{index + 1};
  }
  graph::Output sum = on(graph::placeholder(g, "x", DType::f32, {elements}));
  for (int index = 0; index < kKept; ++index) {
    sum = on(g.add("Add", {sum, variables[static_cast<std::size_t>(index)]}, {}, "sum" + std::to_string(index)));
  }
  const graph::Output big = on(graph::placeholder(g, "big", DType::f32, {-1}));
  on(g.add("Add", {big, big}, {}, "twice"));
  return g;
}

void refused_arena_is_served(const std::string& name, std::size_t granule) {
  const auto manager = expandable_manager(name, granule);
  const auto elements = static_cast<std::int64_t>(granule / 4 * 3 / sizeof(float));
  runtime::Session survivor(variables_graph("a", name, elements), {.name = "survivor", .devices = manager.get()});
  {
    runtime::Session other(variables_graph("b", name, elements), {.name = "other", .devices = manager.get()});
    for (int index = 0; index < kKept; ++index) {
      survivor.run({}, {"a" + std::to_string(index)});
      other.run({}, {"b" + std::to_string(index)});
    }
  }  // the other session's variables go: each of the six granules keeps a piece of one of the survivor's
  ASSERT_EQ(manager->device(name).memory().stats().bytes_reserved, 6 * granule);
  std::vector<std::vector<float>> before;
  for (int index = 0; index < kKept; ++index) {
    before.push_back(survivor.read_variable("a" + std::to_string(index)).to_vector<float>());
  }
  // The step's arena: x (the sums reuse it in place) and four granules of big (twice reuses it): refused beside
  // the six pinned granules of eight, served once the variables move into three.
  device::Device& cpu = manager->device("cpu:0");
  const auto big_elements = static_cast<std::int64_t>(4 * granule / sizeof(float));
  const runtime::FeedMap feeds = {
      {"x",
       Tensor::from_vector<float>(std::vector<float>(static_cast<std::size_t>(elements), 1.0F), Shape{elements}, cpu)},
      {"big", Tensor::from_vector<float>(std::vector<float>(static_cast<std::size_t>(big_elements), 2.0F),
                                         Shape{big_elements}, cpu)}};
  ASSERT_GT(survivor.plan({{"x", {DType::f32, {elements}}}, {"big", {DType::f32, {big_elements}}}}, {"sum3", "twice"})
                .devices.at(0)
                .arena_bytes,
            2 * granule);
  const std::vector<Tensor> fetched = survivor.run(feeds, {"sum3", "twice"});
  const std::vector<float> sum = fetched.at(0).to_vector<float>();
  ASSERT_EQ(sum.size(), static_cast<std::size_t>(elements));
  for (std::size_t index = 0; index < sum.size(); index += 997) {
    float expected = 1.0F;
    for (const auto& values : before) expected += values[index];
    EXPECT_FLOAT_EQ(sum[index], expected) << index;
  }
  EXPECT_EQ(fetched.at(1).to_vector<float>().back(), 4.0F);
  for (int index = 0; index < kKept; ++index) {
    EXPECT_EQ(survivor.read_variable("a" + std::to_string(index)).to_vector<float>(),
              before[static_cast<std::size_t>(index)])
        << index;
  }
}

TEST(CudaCompaction, ListedBuffersMoveKeepTheirBytesAndGiveGranulesBack) {
  TP_REQUIRE_CUDA();
  const std::size_t granule = cuda_granularity();
  ASSERT_GT(granule, 0U);
  listed_buffers_move("cuda:0", granule);
}

TEST(CudaCompaction, ASessionsRefusedArenaIsServedAndItsKernelsReadTheMovedVariables) {
  TP_REQUIRE_CUDA();
  const std::size_t granule = cuda_granularity();
  ASSERT_GT(granule, 0U);
  refused_arena_is_served("cuda:0", granule);
}

TEST(CudaCompactionOnSim, ListedBuffersMoveKeepTheirBytesAndGiveGranulesBack) {
  listed_buffers_move("sim:0", kSimGranule);
}

TEST(CudaCompactionOnSim, ASessionsRefusedArenaIsServedAndItsKernelsReadTheMovedVariables) {
  refused_arena_is_served("sim:0", kSimGranule);
}

}  // namespace
}  // namespace tp::backend::cuda

// SPDX-License-Identifier: Apache-2.0
// A session compacts its own buffers when a device refuses its step arena at a step boundary
// (SessionOptions::compact_on_oom): two sessions' variables interleave on an expandable sim device, one session
// closes, and the holes it leaves pin every granule, so the other's next arena is refused with the memory free
// beside it. Compaction moves the survivor's variables down (their values intact, their records with them)
// and the step runs at the same capacity; without it, or on BFC, the step fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/profile/memory_profiler.hpp"
#include "tensorpool/runtime/session.hpp"

namespace tp::runtime {
namespace {

constexpr std::int64_t kVariableElements = 384 * 1024;  // 1.5 MiB of float32: blocks straddle 2 MiB granules
constexpr int kVariables = 4;

// Variables `prefix`0..3 (uniform values, a seed each) and y = x + x, all on sim:0.
graph::Graph variables_graph(const std::string& prefix) {
  graph::Graph g;
  for (int index = 0; index < kVariables; ++index) {
    const graph::Output variable = graph::variable(g, prefix + std::to_string(index), DType::f32, {kVariableElements});
    graph::Node& node = g.mutable_node(variable.node);
    node.device = "sim:0";
    node.attributes["initializer"] = std::string("uniform");
    node.attributes["seed"] = std::int64_t{index + 1};
  }
  const graph::Output x = graph::placeholder(g, "x", DType::f32, {-1});
  g.mutable_node(x.node).device = "sim:0";
  const graph::Output y = g.add("Add", {x, x}, {}, "y");
  g.mutable_node(y.node).device = "sim:0";
  return g;
}

device::DeviceManagerOptions sim_device(memory::AllocatorKind allocator) {
  device::DeviceManagerOptions options = testing::two_sim_devices(64 * kMiB);
  memory::MemoryConfig config;
  config.allocator = allocator;
  config.limit_bytes = 16 * kMiB;
  options.memory_configs[device::parse_device_id("sim:0", "device")] = config;
  return options;
}

FeedMap feed_x(device::DeviceManager& manager, std::int64_t elements) {
  std::vector<float> values(static_cast<std::size_t>(elements));
  for (std::size_t index = 0; index < values.size(); ++index) values[index] = static_cast<float>(index % 1000) * 0.5F;
  return {{"x", Tensor::from_vector<float>(values, Shape{elements}, manager.device("cpu:0"))}};
}

// The survivor's variables, created one at a time and interleaved with another session's, which then closes:
// every 2 MiB granule still holds a piece of a survivor's variable, and 6 MiB of 16 are in use.
struct Fragmented {
  std::vector<std::vector<float>> values;  // the survivor's variables as created
};

Fragmented fragment(device::DeviceManager& manager, Session& survivor) {
  Fragmented result;
  Session other(variables_graph("b"), {.name = "other", .devices = &manager});
  for (int index = 0; index < kVariables; ++index) {
    survivor.run({}, {"a" + std::to_string(index)});
    other.run({}, {"b" + std::to_string(index)});
  }
  for (int index = 0; index < kVariables; ++index) {
    result.values.push_back(survivor.read_variable("a" + std::to_string(index)).to_vector<float>());
  }
  other.close();
  return result;
}

// y reuses x in place: the step's arena is x's 8 MiB (checked below), which the 4 MiB the limit leaves beyond
// the six granules cannot hold, while 10 MiB are free.
constexpr std::int64_t kStepElements = 2 * 1024 * 1024;

std::size_t arena_bytes(Session& session, std::int64_t elements) {
  return session.plan({{"x", graph::TensorType{DType::f32, {elements}}}}, {"y"}).devices.at(0).arena_bytes;
}

TEST(SessionCompaction, ARefusedArenaIsServedAfterTheSessionMovesItsVariables) {
  device::DeviceManager manager(sim_device(memory::AllocatorKind::expandable), testing::kNoEnv);
  device::Device& sim = manager.device("sim:0");
  profile::MemoryProfiler profiler({&sim});
  Session survivor(variables_graph("a"), {.name = "survivor", .devices = &manager});
  const Fragmented before = fragment(manager, survivor);
  const memory::MemoryStats fragmented = sim.memory().stats();
  ASSERT_EQ(fragmented.bytes_reserved, 12 * kMiB) << "each of the six granules keeps a piece of a variable";
  ASSERT_EQ(fragmented.bytes_in_use, 6 * kMiB);
  ASSERT_EQ(arena_bytes(survivor, kStepElements), 8 * kMiB);

  const std::vector<Tensor> fetched = survivor.run(feed_x(manager, kStepElements), {"y"});
  const std::vector<float> y = fetched.at(0).to_vector<float>();
  ASSERT_EQ(y.size(), static_cast<std::size_t>(kStepElements));
  for (std::size_t index = 0; index < y.size(); index += 4099) {
    EXPECT_EQ(y[index], static_cast<float>(index % 1000)) << index;  // x + x
  }
  for (int index = 0; index < kVariables; ++index) {
    EXPECT_EQ(survivor.read_variable("a" + std::to_string(index)).to_vector<float>(), before.values[index]) << index;
  }
  const memory::MemoryStats after = sim.memory().stats();
  EXPECT_LE(after.bytes_reserved, 16 * kMiB);
  EXPECT_EQ(after.num_compactions, 1u);
  EXPECT_EQ(after.bytes_compacted, 3 * kMiB);
  EXPECT_EQ(survivor.memory_stats("sim:0").num_compactions, 1u) << "the session's view shows the device's";
  const std::string summary = profile::memory_summary(sim);
  EXPECT_NE(summary.find("3.00 MiB moved"), std::string::npos) << summary;
  // The records moved with the blocks: the tracking adaptor's and the profiler's live sets are the survivor's
  // buffers at the same addresses, and both are empty once the survivor closes (a record left at an old address
  // would stay live).
  std::vector<std::string> live;
  std::vector<std::uintptr_t> tracked;
  for (const memory::TrackedAllocation& allocation : sim.memory().tracking()->live_allocations()) {
    live.push_back(allocation.tag.name);
    tracked.push_back(reinterpret_cast<std::uintptr_t>(allocation.ptr));
  }
  EXPECT_EQ(live, (std::vector<std::string>{"a0", "a1", "a2", "a3", "survivor/arena"}));
  std::vector<std::uintptr_t> recorded;
  const profile::MemorySnapshot snapshot = profiler.snapshot();
  for (const profile::LiveTensor& tensor : snapshot.devices.at(0).live) recorded.push_back(tensor.address);
  const auto moves =
      std::count_if(snapshot.devices.at(0).events.begin(), snapshot.devices.at(0).events.end(),
                    [](const profile::MemoryEvent& event) { return event.action == profile::EventAction::relocate; });
  EXPECT_EQ(moves, 2) << "the timeline shows each move";
  std::sort(tracked.begin(), tracked.end());
  std::sort(recorded.begin(), recorded.end());
  EXPECT_EQ(recorded, tracked);
  // A second run of the step allocates nothing and computes the same.
  EXPECT_EQ(survivor.run(feed_x(manager, kStepElements), {"y"}).at(0).to_vector<float>(), y);
  survivor.close();
  EXPECT_EQ(sim.memory().tracking()->live_count(), 0u);
  EXPECT_TRUE(profiler.snapshot().devices.at(0).live.empty());
}

TEST(SessionCompaction, WithoutCompactionTheSameStepIsRefused) {
  device::DeviceManager manager(sim_device(memory::AllocatorKind::expandable), testing::kNoEnv);
  Session survivor(variables_graph("a"), {.name = "survivor", .compact_on_oom = false, .devices = &manager});
  (void)fragment(manager, survivor);
  EXPECT_THROW(survivor.run(feed_x(manager, kStepElements), {"y"}), OutOfMemoryError);
}

TEST(SessionCompaction, BfcCannotMoveBlocksAndRefusesAsBefore) {
  device::DeviceManager manager(sim_device(memory::AllocatorKind::bfc), testing::kNoEnv);
  Session survivor(variables_graph("a"), {.name = "survivor", .devices = &manager});
  (void)fragment(manager, survivor);
  try {
    survivor.run(feed_x(manager, kStepElements), {"y"});
    FAIL() << "an 8 MiB arena fitted between 1.5 MiB holes";
  } catch (const OutOfMemoryError& error) {
    EXPECT_FALSE(error.report().compaction.has_value()) << error.what();
  }
}

TEST(SessionCompaction, ARealShortageIsRefusedWithoutCompacting) {
  device::DeviceManager manager(sim_device(memory::AllocatorKind::expandable), testing::kNoEnv);
  Session survivor(variables_graph("a"), {.name = "survivor", .devices = &manager});
  const Fragmented before = fragment(manager, survivor);
  ASSERT_EQ(arena_bytes(survivor, 2 * kStepElements), 16 * kMiB);
  try {
    survivor.run(feed_x(manager, 2 * kStepElements), {"y"});
    FAIL() << "a 16 MiB arena fitted beside 6 MiB of variables in 16 MiB";
  } catch (const OutOfMemoryError& error) {
    EXPECT_FALSE(error.report().compaction.has_value()) << "10 MiB are free: moving blocks cannot make 16";
  }
  EXPECT_EQ(manager.device("sim:0").memory().stats().num_compactions, 0u);
  for (int index = 0; index < kVariables; ++index) {
    EXPECT_EQ(survivor.read_variable("a" + std::to_string(index)).to_vector<float>(), before.values[index]) << index;
  }
}

// Another session's variables, which the refused session cannot move, still pin every granule after it moved its
// own: the request is refused again, and its report says what the compaction moved and gave back.
TEST(SessionCompaction, ARefusalCompactionCannotCureSaysWhatItMovedAndGaveBack) {
  device::DeviceManager manager(sim_device(memory::AllocatorKind::expandable), testing::kNoEnv);
  Session survivor(variables_graph("a"), {.name = "survivor", .devices = &manager});
  Session other(variables_graph("b"), {.name = "other", .devices = &manager});
  {
    Session gone(variables_graph("c"), {.name = "gone", .devices = &manager});
    for (int index = 0; index < 3; ++index) {
      survivor.run({}, {"a" + std::to_string(index)});
      gone.run({}, {"c" + std::to_string(index)});
      other.run({}, {"b" + std::to_string(index)});
    }
  }
  const memory::MemoryStats fragmented = manager.device("sim:0").memory().stats();
  ASSERT_EQ(fragmented.bytes_in_use, 9 * kMiB);
  const std::int64_t elements = kStepElements / 4 * 3;  // a 6 MiB arena: 7 MiB are free
  ASSERT_EQ(arena_bytes(survivor, elements), 6 * kMiB);
  try {
    survivor.run(feed_x(manager, elements), {"y"});
    FAIL() << "a 6 MiB arena fitted; reserved " << manager.device("sim:0").memory().stats().bytes_reserved;
  } catch (const OutOfMemoryError& error) {
    ASSERT_TRUE(error.report().compaction.has_value()) << error.what();
    EXPECT_TRUE(error.report().compaction->ran);
    const std::string what = error.what();
    EXPECT_NE(what.find("Compaction ran before this request"), std::string::npos) << what;
  }
  // Whatever moved kept its values; the other session's variables did not move.
  EXPECT_EQ(survivor.read_variable("a0").to_vector<float>().size(), static_cast<std::size_t>(kVariableElements));
  EXPECT_EQ(other.run(feed_x(manager, 1000), {"y"}).at(0).to_vector<float>().size(), 1000u);
}

// A session that allocates on the same device while another compacts (this test is in the ThreadSanitizer pass):
// its own tensors never move and keep their values, and the stack's records stay consistent. Its small tensors
// may land in the holes and keep a granule, so the compacting session's step may or may not fit: either way
// nothing is lost.
TEST(SessionCompaction, ASessionAllocatingMeanwhileIsUndisturbed) {
  device::DeviceManager manager(sim_device(memory::AllocatorKind::expandable), testing::kNoEnv);
  Session survivor(variables_graph("a"), {.name = "survivor", .devices = &manager});
  const Fragmented before = fragment(manager, survivor);
  Session busy(variables_graph("c"), {.name = "busy", .planner = false, .devices = &manager});
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::atomic<int> runs{0};
  std::thread other([&] {
    while (!stop.load() || runs.load() < 20) {
      const std::vector<float> y = busy.run(feed_x(manager, 1000), {"y"}).at(0).to_vector<float>();
      for (std::size_t index = 0; index < y.size(); ++index) {
        if (y[index] != static_cast<float>(index % 1000)) ++wrong;
      }
      ++runs;
    }
  });
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      const std::vector<float> y = survivor.run(feed_x(manager, kStepElements), {"y"}).at(0).to_vector<float>();
      EXPECT_EQ(y[4099], static_cast<float>(4099 % 1000));
    } catch (const OutOfMemoryError& error) {
      EXPECT_TRUE(error.report().compaction.has_value()) << error.what();
    }
  }
  stop = true;
  other.join();
  EXPECT_EQ(wrong.load(), 0);
  for (int index = 0; index < kVariables; ++index) {
    EXPECT_EQ(survivor.read_variable("a" + std::to_string(index)).to_vector<float>(), before.values[index]) << index;
  }
  survivor.close();
  busy.close();
  EXPECT_EQ(manager.device("sim:0").memory().tracking()->live_count(), 0u);
  EXPECT_EQ(manager.device("sim:0").memory().stats().bytes_in_use, 0u);
}

}  // namespace
}  // namespace tp::runtime

// SPDX-License-Identifier: Apache-2.0
// The sharding ops' layout across workers: a worker of an mpirun job builds one local replica that owns shard
// `first_shard` of `shards` (ZeRO over MPI). With one participant the communicator moves nothing, so what the
// kernels hand out is the layout alone: ReduceScatter's output is exactly that chunk of the packed bucket,
// zero-padded at the tail, and AllGather keeps the replica's own shard. Inconsistent layouts are refused.
#include "graph/support/graph_test_support.hpp"
#include "tensorpool/distribute/collective_ops.hpp"

namespace tp::graph::testing {
namespace {

// distribute registers its collectives itself (graph, below it, does not know them): once per process into the
// global registry, however often it is asked; into another registry, once.
TEST(CollectiveOps, RegisterOnceIntoTheGlobalRegistryWithAKernelForEveryBackend) {
  distribute::register_collective_ops();
  distribute::register_collective_ops();  // idempotent
  for (const char* name : {"AllReduce", "ReduceScatter", "AllGather"}) {
    const OpDef& definition = OpRegistry::global().get(name);
    EXPECT_TRUE(definition.collective) << name;
    EXPECT_TRUE(definition.bind_kernel) << name;
    EXPECT_EQ(definition.kernels.count(device::DeviceKind::cpu), 1U) << name;
    EXPECT_EQ(definition.kernels.count(device::DeviceKind::sim), 1U) << name;
  }
  EXPECT_TRUE(OpRegistry::global().get("AllGather").stateful);
  const OpDef& fused = OpRegistry::global().get("AllReduceAdam");  // the all-reduce folded into Adam
  EXPECT_TRUE(fused.collective);
  EXPECT_TRUE(fused.stateful);
  EXPECT_EQ(fused.kernels.count(device::DeviceKind::cpu), 1U);
  EXPECT_EQ(fused.kernels.count(device::DeviceKind::sim), 1U);

  OpRegistry registry;
  distribute::register_collective_ops(registry);
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"AllGather", "AllReduce", "AllReduceAdam", "ReduceScatter"}));
  EXPECT_THROW(distribute::register_collective_ops(registry), InvalidArgument);
}

class ShardingOps : public GraphValuesTest<> {
 protected:
  ShardingOps() { distribute::register_collective_ops(); }
  Attributes layout(std::int64_t shards, std::int64_t first_shard) const {
    return {{"algorithm", std::string("ring")},
            {"replicas", std::int64_t{1}},
            {"shards", shards},
            {"first_shard", first_shard}};
  }
};

TEST_F(ShardingOps, ReduceScatterHandsOutTheLocalReplicasShardOfTheJob) {
  // A bucket of 4 + 6 = 10 elements in 3 shards of ceil(10 / 3) = 4: [0, 4), [4, 8), [8, 10) and 2 of padding.
  const Output a = bind("a", {{0, 1, 2, 3}, DType::f32, {4}});
  const Output b = bind("b", {{4, 5, 6, 7, 8, 9}, DType::f32, {2, 3}});
  std::vector<Output> shards;
  for (std::int64_t first = 0; first < 3; ++first) {
    const NodeId scatter = graph_.add_node("ReduceScatter", {a, b}, layout(3, first));
    EXPECT_EQ(graph_.type_of({scatter, 0}).dims, std::vector<std::int64_t>{4});
    shards.push_back({scatter, 0});
  }
  const auto got = run_on_cpu_and_sim(graph_, values_, shards);
  EXPECT_EQ(got[0], (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(got[1], (std::vector<double>{4, 5, 6, 7}));
  EXPECT_EQ(got[2], (std::vector<double>{8, 9, 0, 0}));
}

// The replica's own shard stays as it was (the other shards are what the other workers send: none here, so
// neither they nor the bucket's other elements, which no one wrote, are looked at).
TEST_F(ShardingOps, AllGatherKeepsTheLocalReplicasShard) {
  const Output a = bind("a", {{1, 2, 3}, DType::f32, {3}});
  const Output b = bind("b", {{4, 5}, DType::f32, {2}});
  graph_.add_node("AllGather", {a, b}, layout(2, 1));  // shard 1 of 2: elements [3, 5), all of b
  const auto got = run_on_cpu_and_sim(graph_, values_, {b});
  EXPECT_EQ(got[0], (std::vector<double>{4, 5}));
}

TEST_F(ShardingOps, ALayoutWhoseReplicasAreNotShardsIsRefused) {
  const Output a = bind("a", {{0, 1, 2, 3}, DType::f32, {4}});
  expect_invalid([&] { graph_.add_node("ReduceScatter", {a}, layout(3, 3)); }, {"ReduceScatter", "not shards of 3"});
  expect_invalid([&] { graph_.add_node("AllGather", {a}, layout(2, -1)); }, {"AllGather", "not shards of 2"});
}

// AllReduceAdam's inputs: gradients and parameters of P parameters x R replicas, then whole m and v (P x R each)
// or, with sharded_slots, one m and one v per replica of ceil(N / R) elements (N: a replica's parameters).
TEST_F(ShardingOps, AllReduceAdamRefusesInputsThatDoNotSplitAsItsSlotsSay) {
  const auto tensor = [&](const std::string& name, std::int64_t elements) {
    return bind(name, {std::vector<double>(static_cast<std::size_t>(elements), 0.0), DType::f32, {elements}});
  };
  const Output g0 = tensor("g0", 5), g1 = tensor("g1", 5), p0 = tensor("p0", 5), p1 = tensor("p1", 5);
  const Output half0 = tensor("half0", 3), half1 = tensor("half1", 3), whole = tensor("whole", 5);
  const Attributes sharded{{"replicas", std::int64_t{2}}, {"sharded_slots", true}};
  graph_.add_node("AllReduceAdam", {g0, g1, p0, p1, half0, half1, half0, half1}, sharded);  // ceil(5 / 2) = 3
  expect_invalid(
      [&] {
        graph_.add_node("AllReduceAdam", {g0, g1, p0, p1, whole, whole, whole, whole}, sharded);
      },
      {"AllReduceAdam", "float32[5]", "sharded m and v are float32[3]"});
  expect_invalid(
      [&] {
        graph_.add_node("AllReduceAdam", {g0, g1, p0, p1, half0, half1, half0}, sharded);
      },
      {"AllReduceAdam", "7 inputs", "an m and a v per replica"});
  expect_invalid(
      [&] {
        graph_.add_node("AllReduceAdam", {g0, g1, p0, p1, half0, half1, half0, half1}, {{"replicas", std::int64_t{2}}});
      },
      {"AllReduceAdam", "is float32[3]", "gradient on replica 0 is float32[5]"});
}

}  // namespace
}  // namespace tp::graph::testing

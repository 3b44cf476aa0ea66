// SPDX-License-Identifier: Apache-2.0
// The strategy interface (train/distribution_strategy.hpp): the factory maps each Strategy to its class and
// what the tools ask of it; prepare() rejects bad settings naming them; the all-reduce algorithm parses by name
// and a bad name throws naming it; a strategy of the test's own contributes the graph's update stage through
// build_model_graph, after the forward and backward stages that every strategy shares.
#include "tensorpool/train/distribution_strategy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/train/sequential.hpp"
#include "train/model_graph.hpp"
#include "train/replicated_update.hpp"

namespace tp::train {
namespace {

constexpr std::int64_t kIn = 12, kHidden = 8, kClasses = 4;

std::vector<Dense> layers() {
  return {{.units = kHidden, .activation = Activation::relu}, {.units = kClasses, .activation = Activation::softmax}};
}

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "no tp::InvalidArgument";
}

TEST(AllReduce, ParsesEveryNameAndNamesABadOne) {
  for (const AllReduce algorithm : {AllReduce::ring, AllReduce::reduce_to_one, AllReduce::mpi, AllReduce::none,
                                    AllReduce::nccl, AllReduce::automatic}) {
    EXPECT_EQ(parse_all_reduce(name_of(algorithm)), algorithm);
  }
  EXPECT_NE(message_of([] { static_cast<void>(parse_all_reduce("butterfly")); }).find("'butterfly'"),
            std::string::npos);
  // The by-name constructor keeps user code compiling and checks the name at once.
  EXPECT_EQ(Strategy::mirrored({"sim:0", "sim:1"}, "reduce_to_one").all_reduce, AllReduce::reduce_to_one);
  EXPECT_THROW(static_cast<void>(Strategy::mirrored({"sim:0", "sim:1"}, "rings")), InvalidArgument);
}

TEST(DistributionStrategy, TheFactoryMapsEachStrategyToItsClass) {
  const auto one = make_distribution_strategy(Strategy::one_device("sim:0"));
  const auto mirrored = make_distribution_strategy(Strategy::mirrored({"sim:0", "sim:1"}));
  const auto workers = make_distribution_strategy(Strategy::multi_worker({"sim:0"}));
  const auto server = make_distribution_strategy(Strategy::parameter_server({"sim:0", "sim:1"}, "cpu:0", 1));
  EXPECT_EQ(one->name(), "one");
  EXPECT_EQ(mirrored->name(), "mirrored");
  EXPECT_EQ(workers->name(), "multi_worker");
  EXPECT_EQ(server->name(), "parameter_server");
  EXPECT_TRUE(one->single_process() && mirrored->single_process());
  EXPECT_FALSE(workers->single_process() || server->single_process());
  EXPECT_TRUE(workers->replicates_across_processes() && workers->host_exchange_per_step());
  EXPECT_FALSE(mirrored->replicates_across_processes() || mirrored->host_exchange_per_step());
  EXPECT_TRUE(server->runs_own_loop());
  EXPECT_FALSE(one->runs_own_loop() || mirrored->runs_own_loop() || workers->runs_own_loop());
  EXPECT_EQ(server->named_devices(), (std::vector<std::string>{"cpu:0", "sim:0", "sim:1"}));
  EXPECT_EQ(mirrored->named_devices(), (std::vector<std::string>{"sim:0", "sim:1"}));
  EXPECT_EQ(server->header_line(false, 1),
            "  parameter server on cpu:0, 2 asynchronous workers (sim:0,sim:1), max "
            "staleness 1\n");
  EXPECT_EQ(mirrored->header_line(false, 1), "");
  EXPECT_NO_THROW(mirrored->check_step(StepCall::launch));
  EXPECT_THROW(workers->check_step(StepCall::launch), InvalidArgument);
  EXPECT_NO_THROW(workers->check_step(StepCall::train));
  EXPECT_THROW(server->check_step(StepCall::train), InvalidArgument);
  EXPECT_EQ(make_distribution_strategy(Strategy::multi_worker({"sim:0"}, Shard::optimizer))->collective_checkpoint(),
            true);
  EXPECT_FALSE(workers->collective_checkpoint());
}

TEST(DistributionStrategy, PrepareRejectsBadSettingsNamingThem) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  const CompileOptions options;
  const auto prepare = [&](const Strategy& strategy) {
    return make_distribution_strategy(strategy)->prepare(manager, options, layers());
  };
  EXPECT_EQ(prepare(Strategy::one_device("sim:1")), (std::vector<std::string>{"sim:1"}));
  EXPECT_EQ(prepare(Strategy::one_device()).size(), 1U);
  std::vector<std::string> accelerators;  // mirrored without devices: every accelerator (sim, opencl where present)
  for (device::Device* device : manager.devices()) {
    if (device->kind() != device::DeviceKind::cpu) accelerators.push_back(device->name());
  }
  EXPECT_EQ(prepare(Strategy::mirrored()), accelerators);
  Strategy two_for_one = Strategy::one_device("sim:0");
  two_for_one.devices.push_back("sim:1");
  EXPECT_NE(message_of([&] { static_cast<void>(prepare(two_for_one)); }).find("takes one device, not 2"),
            std::string::npos);
  EXPECT_THROW(static_cast<void>(prepare(Strategy::mirrored({"sim:0", "sim:7"}))), InvalidArgument);
  Strategy no_buckets = Strategy::mirrored({"sim:0", "sim:1"});
  no_buckets.bucket_bytes = 0;
  EXPECT_NE(message_of([&] { static_cast<void>(prepare(no_buckets)); }).find("bucket_bytes = 0"), std::string::npos);
  const Strategy sharded_alone = Strategy::mirrored({"sim:0"}, AllReduce::ring, Shard::optimizer);
  EXPECT_NE(message_of([&] { static_cast<void>(prepare(sharded_alone)); }).find("shard = optimizer"),
            std::string::npos);
  EXPECT_EQ(prepare(Strategy::mirrored({"sim:0", "sim:1"}, AllReduce::ring, Shard::gradients)).size(), 2U);
}

// auto picks NCCL only where it can serve (each replica a cuda device on a GPU of its own), the in-process ring
// for logical devices sharing a GPU or other kinds, MPI across workers without cuda; an explicit nccl it cannot
// serve, and collectives that do not fit the strategy, are refused naming the fix. Host-side: the physical
// devices are given by name, no GPU is needed.
TEST(AllReduce, AutoChoosesNcclOnlyForCudaDevicesOnDistinctGpus) {
  using Kind = Strategy::Kind;
  const std::vector<std::string> gpus = {"cuda:0", "cuda:1"};
  const std::vector<std::string> one_gpu = {"cuda:0", "cuda:0"};  // cuda:0 split into two logical devices
  const std::vector<std::string> sims = {"sim:0", "sim:1"};
  const AllReduceChoice distinct = choose_all_reduce(Kind::mirrored, AllReduce::automatic, gpus, gpus);
  EXPECT_EQ(distinct.all_reduce, AllReduce::nccl);
  EXPECT_NE(distinct.reason.find("nccl"), std::string::npos);
  const AllReduceChoice shared = choose_all_reduce(Kind::mirrored, AllReduce::automatic, gpus, one_gpu);
  EXPECT_EQ(shared.all_reduce, AllReduce::ring);
  EXPECT_NE(shared.reason.find("share the GPU cuda:0"), std::string::npos) << shared.reason;
  EXPECT_EQ(choose_all_reduce(Kind::mirrored, AllReduce::automatic, sims, sims).all_reduce, AllReduce::ring);
  EXPECT_EQ(choose_all_reduce(Kind::mirrored, AllReduce::automatic, {"cuda:0"}, {"cuda:0"}).all_reduce, AllReduce::ring)
      << "one replica has nothing to reduce";
  EXPECT_EQ(
      choose_all_reduce(Kind::mirrored, AllReduce::automatic, {"cuda:0", "sim:0"}, {"cuda:0", "sim:0"}).all_reduce,
      AllReduce::ring);
  EXPECT_EQ(choose_all_reduce(Kind::mirrored, AllReduce::ring, gpus, gpus).all_reduce, AllReduce::ring)
      << "an explicit ring stays";
  EXPECT_EQ(choose_all_reduce(Kind::multi_worker, AllReduce::automatic, {"cuda:0"}, {"cuda:0"}).all_reduce,
            AllReduce::nccl);
  EXPECT_EQ(choose_all_reduce(Kind::multi_worker, AllReduce::automatic, {"sim:0"}, {"sim:0"}).all_reduce,
            AllReduce::mpi);
  EXPECT_EQ(choose_all_reduce(Kind::multi_worker, AllReduce::automatic, gpus, one_gpu).all_reduce, AllReduce::mpi);
  EXPECT_EQ(choose_all_reduce(Kind::one, AllReduce::ring, {"cuda:0"}, {"cuda:0"}).all_reduce, AllReduce::ring);
  EXPECT_EQ(choose_all_reduce(Kind::parameter_server, AllReduce::none, gpus, gpus).all_reduce, AllReduce::none);

  EXPECT_NE(message_of([&] {
              static_cast<void>(choose_all_reduce(Kind::mirrored, AllReduce::nccl, gpus, one_gpu));
            }).find("use all_reduce ring"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              static_cast<void>(choose_all_reduce(Kind::mirrored, AllReduce::nccl, sims, sims));
            }).find("sim:0 is not a cuda device"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              static_cast<void>(choose_all_reduce(Kind::multi_worker, AllReduce::ring, sims, sims));
            }).find("must be auto, mpi or nccl"),
            std::string::npos);
  EXPECT_THROW(static_cast<void>(choose_all_reduce(Kind::mirrored, AllReduce::mpi, sims, sims)), InvalidArgument);
}

TEST(AllReduce, PrepareSettlesAutoFromTheDevices) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  auto mirrored = make_distribution_strategy(Strategy::mirrored({"sim:0", "sim:1"}));
  EXPECT_EQ(Strategy::mirrored({"sim:0", "sim:1"}).all_reduce, AllReduce::automatic);
  static_cast<void>(mirrored->prepare(manager, CompileOptions{}, layers()));
  EXPECT_EQ(mirrored->description().all_reduce, AllReduce::ring) << "sim devices: the in-process ring";
  auto nccl_on_sims = make_distribution_strategy(Strategy::mirrored({"sim:0", "sim:1"}, AllReduce::nccl));
  EXPECT_THROW(static_cast<void>(nccl_on_sims->prepare(manager, CompileOptions{}, layers())), InvalidArgument);
}

// A strategy of the test's own: one replica per listed device, the replicated update stage, and a record of
// the stage it was asked to build.
class RecordingStrategy final : public DistributionStrategy {
 public:
  using DistributionStrategy::DistributionStrategy;
  mutable std::size_t replicas_seen = 0;
  mutable std::size_t gradients_seen = 0;

  void add_update_stage(const ModelSpec& spec, const std::vector<std::string>& devices, const GradientStage& gradients,
                        ModelGraph& model) const override {
    replicas_seen = gradients.gradients.size();
    gradients_seen = gradients.gradients.front().size();
    add_replicated_updates(spec, devices, gradients, model);
  }
  std::string_view name() const override { return "recording"; }

 protected:
  std::vector<std::string> resolve_devices(device::DeviceManager& manager, const CompileOptions&,
                                           const std::vector<Dense>&) override {
    return listed_or_accelerators(manager);
  }
};

TEST(DistributionStrategy, ATestStrategyBuildsTheUpdateStageOfTheSharedGraph) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  RecordingStrategy strategy(Strategy::mirrored({"sim:0", "sim:1"}));
  const std::vector<std::string> devices = strategy.prepare(manager, {}, layers());
  const ModelSpec spec{.input_shape = {kIn}, .layers = layers()};
  const ModelGraph model = build_model_graph(spec, devices, strategy);
  EXPECT_EQ(strategy.replicas_seen, 2U);
  EXPECT_EQ(strategy.gradients_seen, 4U);  // two kernels and two biases
  // The same graph as the mirrored strategy's: node for node, in order.
  const ModelGraph mirrored =
      build_model_graph(spec, devices, *make_distribution_strategy(Strategy::mirrored({"sim:0", "sim:1"})));
  ASSERT_EQ(model.graph.nodes().size(), mirrored.graph.nodes().size());
  for (std::size_t index = 0; index < model.graph.nodes().size(); ++index) {
    EXPECT_EQ(model.graph.nodes()[index].name, mirrored.graph.nodes()[index].name);
    EXPECT_EQ(model.graph.nodes()[index].op, mirrored.graph.nodes()[index].op);
  }
  EXPECT_EQ(model.updates, mirrored.updates);
  EXPECT_EQ(model.updates.size(), 8U);  // four parameters on each of two replicas
  EXPECT_EQ(std::count_if(model.graph.nodes().begin(), model.graph.nodes().end(),
                          [](const graph::Node& node) { return node.op == "AllReduce"; }),
            1);
}

TEST(DistributionStrategy, TheDescriptionAndCheckpointNamesRoundTrip) {
  const auto server = make_distribution_strategy(Strategy::parameter_server({"sim:0"}, "cpu:0"));
  EXPECT_EQ(server->description().parameter_device, "cpu:0");
  EXPECT_EQ(server->description().all_reduce, AllReduce::none);
  EXPECT_EQ(DistributionStrategy::checkpoint_name("replica_1/dense/kernel"), "dense/kernel");
  EXPECT_EQ(DistributionStrategy::checkpoint_name("shard_1/adam_m"), "shard_1/adam_m");
}

}  // namespace
}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
// Gradient buckets (Strategy::bucket_bytes): which gradients share an AllReduce (filled from the last
// parameter back, a new bucket when the next gradient would overflow it, per gradient dtype), and that
// bucketing changes no result: with two replicas every element's sum is a + b whatever the bucket, so the
// losses and weights are bitwise those of one bucket; with three, within float tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/cpu/kernel_test_support.hpp"
#include "backend/support/backend_params.hpp"
#include "device/support/device_test_support.hpp"
#include "runtime/executable.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/train/sequential.hpp"
#include "train/model_graph.hpp"
#include "train/support/synthetic_training.hpp"

namespace tp::train {
namespace {

// Gradients in bytes (float32): dense/kernel 12x32 = 1536, dense/bias 128, dense_1/kernel 32x4 = 512,
// dense_1/bias 16.
constexpr std::int64_t kIn = 12, kHidden = 32, kClasses = 4, kRows = 24;

std::vector<Dense> layers() {
  return {{.units = kHidden, .activation = Activation::relu}, {.units = kClasses, .activation = Activation::softmax}};
}

// The AllReduce nodes in creation order, each with the base names of the parameters it reduces.
std::vector<std::pair<std::string, std::vector<std::string>>> buckets_of(const ModelGraph& model) {
  std::vector<std::pair<std::string, std::vector<std::string>>> buckets;
  const graph::Graph& g = model.graph;
  for (const graph::Node& node : g.nodes()) {
    if (node.op != "AllReduce") continue;
    std::vector<std::string> parameters;
    for (std::size_t input = 0; input < node.inputs.size(); input += 2) {  // replica 0's of each tensor
      const std::string& gradient = g.node(node.inputs[input].node).name;
      const auto& names = model.replicas[0].gradients;
      const auto found = std::find(names.begin(), names.end(), gradient);
      EXPECT_NE(found, names.end()) << gradient;
      parameters.push_back(model.variables[0][static_cast<std::size_t>(found - names.begin())].substr(10));
    }
    buckets.emplace_back(node.name, parameters);
  }
  return buckets;
}

TEST(GradientBuckets, FilledFromTheLastParameterBackUpToTheLimit) {
  const auto build = [](std::int64_t bucket_bytes) {
    return build_model_graph({.input_shape = {kIn}, .layers = layers(), .bucket_bytes = bucket_bytes},
                             {"sim:0", "sim:1"});
  };
  using Buckets = std::vector<std::pair<std::string, std::vector<std::string>>>;
  EXPECT_EQ(buckets_of(build(Strategy::kDefaultBucketBytes)),
            (Buckets{{"all_reduce/gradients", {"dense_1/bias", "dense_1/kernel", "dense/bias", "dense/kernel"}}}));
  // 16 + 512 fit in 600; the 128-byte bias would not; the 1536-byte kernel gets a bucket of its own.
  EXPECT_EQ(buckets_of(build(600)), (Buckets{{"all_reduce/gradients_bucket_0", {"dense_1/bias", "dense_1/kernel"}},
                                             {"all_reduce/gradients_bucket_1", {"dense/bias"}},
                                             {"all_reduce/gradients_bucket_2", {"dense/kernel"}}}));
  EXPECT_EQ(buckets_of(build(1)).size(), 4U) << "a gradient larger than the limit still gets one bucket";
  EXPECT_EQ(buckets_of(build(2192)).size(), 1U) << "exactly the four gradients' bytes";
  EXPECT_EQ(buckets_of(build(2191)).size(), 2U);
  // Mixed precision with a float32 output layer: buckets never mix dtypes.
  const ModelGraph mixed = build_model_graph(
      {.input_shape = {kIn},
       .layers = {{.units = kHidden, .activation = Activation::relu},
                  {.units = kClasses, .activation = Activation::softmax, .policy = DTypePolicy::float32()}},
       .bucket_bytes = 600,
       .policy = DTypePolicy::mixed_float16()},
      {"sim:0", "sim:1"});
  EXPECT_EQ(buckets_of(mixed), (Buckets{{"all_reduce/gradients_float32", {"dense_1/bias", "dense_1/kernel"}},
                                        {"all_reduce/gradients_float16_bucket_0", {"dense/bias"}},
                                        {"all_reduce/gradients_float16_bucket_1", {"dense/kernel"}}}));
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> variables;
};

TrainedRun train(device::DeviceManager& manager, const std::vector<std::string>& devices, std::int64_t bucket_bytes,
                 const std::string& name) {
  Strategy strategy = Strategy::mirrored(devices);
  strategy.bucket_bytes = bucket_bytes;
  Sequential model({kIn}, layers());
  model.compile({.optimizer = Adam{.learning_rate = 0.01}}, strategy, {.name = name, .devices = &manager});
  TrainedRun run{.losses = testing::train_synthetic(model, manager, 12, kRows, kIn, kClasses), .variables = {}};
  for (const auto& [variable, value] : model.variables()) run.variables.push_back(value.to_vector<float>());
  return run;
}

// The parameter: the first accelerator of the kind the replicas run on ("sim:0", "opencl:0"); every
// accelerator backend present is tested.
class GradientBucketsOnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  // Device `index` of the parameter's kind.
  std::string on(int index) const { return GetParam().substr(0, GetParam().find(':')) + ":" + std::to_string(index); }
};

TEST_P(GradientBucketsOnDevice, BucketingChangesNoResult) {
  device::DeviceManagerOptions options = runtime::testing::two_sim_devices();
  options.sim_devices = 3;
  options.opencl_devices = 3;
  device::DeviceManager manager(options, runtime::testing::kNoEnv);
  const TrainedRun one_bucket = train(manager, {on(0), on(1)}, Strategy::kDefaultBucketBytes, "one");
  EXPECT_LT(one_bucket.losses.back(), one_bucket.losses.front());
  for (const std::int64_t bytes : {1, 600}) {
    const TrainedRun bucketed = train(manager, {on(0), on(1)}, bytes, "buckets" + std::to_string(bytes));
    EXPECT_EQ(bucketed.losses, one_bucket.losses) << bytes << "-byte buckets";
    EXPECT_EQ(bucketed.variables, one_bucket.variables) << bytes << "-byte buckets";
  }
  const TrainedRun three = train(manager, {on(0), on(1), on(2)}, Strategy::kDefaultBucketBytes, "three");
  const TrainedRun three_bucketed = train(manager, {on(0), on(1), on(2)}, 600, "three_bucketed");
  for (std::size_t step = 0; step < three.losses.size(); ++step) {
    EXPECT_NEAR(three_bucketed.losses[step], three.losses[step], 1e-5 * (1 + std::abs(three.losses[step])));
  }
}

// What makes overlap possible: in the prepared training step, the first bucket's AllReduce (the output
// layer's gradients) does not have to wait for the first layer's weight gradient, the largest GEMM of the
// backward pass; with one bucket it does. (A step may start once its `after` steps have: with inter-op
// threads the first bucket's collective can then run while that GEMM does.)
TEST(GradientBuckets, TheFirstBucketNeedNotWaitForTheRestOfTheBackwardPass) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  const auto first_bucket_follows_layer_one_gradient = [&](std::int64_t bucket_bytes) {
    const ModelGraph model =
        build_model_graph({.input_shape = {kIn}, .layers = layers(), .bucket_bytes = bucket_bytes}, {"sim:0", "sim:1"});
    std::map<std::string, graph::TensorType, std::less<>> feeds{{"inv_global_batch", {DType::f32, {}}}};
    std::vector<std::string> fetches;
    for (const ReplicaNodes& replica : model.replicas) {
      feeds[replica.x] = {DType::f32, {kRows / 2, kIn}};
      feeds[replica.labels] = {DType::i32, {kRows / 2}};
      fetches.push_back(replica.loss);
    }
    const compile::PlacementOptions placement{manager.devices(), &manager.device("sim:0"), true};
    const std::unique_ptr<runtime::Executable> step =
        runtime::prepare(model.graph, feeds, fetches, model.updates, placement);
    const auto index_of = [&](const std::string& node) {
      for (std::size_t index = 0; index < step->steps.size(); ++index) {
        const runtime::Step& candidate = step->steps[index];
        if (candidate.kind == runtime::Step::Kind::kernel && model.graph.node(candidate.node).name == node)
          return index;
      }
      ADD_FAILURE() << "no step runs " << node;
      return std::size_t{0};
    };
    std::vector<std::vector<bool>> follows(step->steps.size(), std::vector<bool>(step->steps.size(), false));
    for (std::size_t index = 0; index < step->steps.size(); ++index) {
      for (std::size_t earlier : step->steps[index].after) {
        follows[index][earlier] = true;
        for (std::size_t before = 0; before < earlier; ++before)
          follows[index][before] = follows[index][before] || follows[earlier][before];
      }
    }
    const std::string first =
        bucket_bytes == Strategy::kDefaultBucketBytes ? "all_reduce/gradients" : "all_reduce/gradients_bucket_0";
    return follows[index_of(first)][index_of(model.replicas[0].gradients[0])] &&
           follows[index_of(first)][index_of(model.replicas[1].gradients[0])];
  };
  EXPECT_TRUE(first_bucket_follows_layer_one_gradient(Strategy::kDefaultBucketBytes));
  EXPECT_FALSE(first_bucket_follows_layer_one_gradient(600));
}

TEST(GradientBuckets, ANonPositiveLimitIsRefused) {
  device::DeviceManager manager(runtime::testing::two_sim_devices(), runtime::testing::kNoEnv);
  Strategy strategy = Strategy::mirrored({"sim:0", "sim:1"});
  strategy.bucket_bytes = 0;
  Sequential model({kIn}, layers());
  tp_test::expect_invalid([&] { model.compile({}, strategy, {.devices = &manager}); },
                          {"bucket_bytes = 0", "must be positive"});
}

INSTANTIATE_TEST_SUITE_P(Accelerators, GradientBucketsOnDevice,
                         ::testing::ValuesIn(device::testing::accelerator_device_names()),
                         backend::testing::backend_test_name);

}  // namespace
}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
// examples/graph_session.cpp: a graph built by hand, planned and run by a session under a quota, then run
// with steps in flight (docs/graph.md, docs/runtime.md).
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/graph/autodiff.hpp"
#include "tensorpool/graph/builder.hpp"
#include "tensorpool/graph/graph.hpp"
#include "tensorpool/runtime/pending_run.hpp"
#include "tensorpool/runtime/session.hpp"

namespace {

struct Model {
  tp::graph::Graph graph;
  std::vector<std::string> update_nodes;  // run as targets: the optimizer's updates
};

// A softmax regression: x [-1, 784] -> logits [-1, 10] -> mean cross-entropy, updated by SGD.
Model build_model() {
  using namespace tp::graph;
  Graph graph;
  Output x = placeholder(graph, "x", tp::DType::f32, {-1, 784});
  Output labels = placeholder(graph, "labels", tp::DType::i32, {-1});
  Output w = variable(graph, "dense/kernel", tp::DType::f32, {784, 10});
  Output logits = graph.add("MatMul", {x, w}, {}, "dense/MatMul");  // float32[-1,10]
  NodeId xent = graph.add_node("SparseSoftmaxCrossEntropy", {logits, labels}, {}, "loss/xent");
  Output loss = graph.add("Mean", {Output{xent, 0}}, {{"axis", 0}}, "loss");  // float32[]

  Output velocity = variable(graph, "dense/kernel/velocity", tp::DType::f32, {784, 10});
  const std::vector<Output> weights{w};
  const auto grads = gradients(graph, loss, weights);
  NodeId update = graph.add_node("ApplySgd", {w, *grads[0], velocity}, {{"learning_rate", 0.1}}, "dense/ApplySgd");
  return {graph, {graph.node(update).name}};
}

tp::runtime::FeedMap make_batch(int step) {
  tp::device::Device& cpu = tp::device::DeviceManager::instance().device("cpu:0");
  std::vector<float> features(128 * 784);
  std::vector<std::int32_t> classes(128);
  for (std::size_t row = 0; row < classes.size(); ++row) {
    classes[row] = static_cast<std::int32_t>((row + static_cast<std::size_t>(step)) % 10);
    features[row * 784 + static_cast<std::size_t>(classes[row])] = 1.0F;  // the class's feature lights up
  }
  return {{"x", tp::Tensor::from_vector<float>(features, tp::Shape{128, 784}, cpu)},
          {"labels", tp::Tensor::from_vector<std::int32_t>(classes, tp::Shape{128}, cpu)}};
}

void plan_and_run(const tp::graph::Graph& graph, const std::vector<std::string>& update_nodes) {
  tp::runtime::FeedMap batch = make_batch(0);
  const tp::Tensor& x = batch.at("x");
  const tp::Tensor& labels = batch.at("labels");
  tp::runtime::Session session(graph, {.name = "trainer", .memory_quota_bytes = 512 * tp::kMiB});
  tp::runtime::MemoryPlan plan =
      session.plan({{"x", {tp::DType::f32, {128, 784}}}, {"labels", {tp::DType::i32, {128}}}}, {"loss"},
                   update_nodes);  // before anything is allocated
  auto fetched = session.run({{"x", x}, {"labels", labels}}, {"loss"}, update_nodes, {.step = 1});
  session.close();  // every byte back to the device
  std::printf("planned peak on %s: %zu B; loss %.4f\n", plan.devices.at(0).device.c_str(),
              plan.devices.at(0).planned_peak_bytes, static_cast<double>(fetched.at(0).to_vector<float>()[0]));
}

void steps_in_flight(const tp::graph::Graph& graph, const std::vector<std::string>& updates) {
  tp::runtime::Session session(graph, {.name = "pipelined"});
  const int steps = 4;
  std::vector<tp::runtime::FeedMap> batch;
  for (int step = 0; step < steps; ++step) batch.push_back(make_batch(step));
  auto feeds = [](const tp::runtime::FeedMap& one) { return one; };
  auto record = [](const std::vector<tp::Tensor>& fetched) {
    std::printf("loss %.4f\n", static_cast<double>(fetched.at(0).to_vector<float>()[0]));
  };
  tp::runtime::PendingRun previous = session.run_async(feeds(batch[0]), {"loss"}, updates, {.step = 1});
  for (int step = 2; step <= steps; ++step) {
    tp::runtime::PendingRun next = session.run_async(feeds(batch[step - 1]), {"loss"}, updates, {.step = step});
    record(previous.wait());  // the devices are already working on `next`
    previous = std::move(next);
  }
  record(previous.wait());
}

}  // namespace

int main() {
  tp::device::DeviceManager::instance().set_sim_devices(1, tp::kGiB);  // the session runs on sim:0
  Model model = build_model();
  plan_and_run(model.graph, model.update_nodes);
  steps_in_flight(model.graph, model.update_nodes);
}

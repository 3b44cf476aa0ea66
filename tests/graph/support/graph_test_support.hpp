// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers for the graph tests: host values that become tensors of any dtype, a tiny direct executor (every
// node in order on one device, outputs from Tensor::empty, placeholders and variables bound from a map), and
// a central-finite-difference gradient check in float64.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernel_test_support.hpp"
#include "backend/support/conformance_support.hpp"
#include "device/support/device_test_support.hpp"
#include "tensorpool/core/tensor.hpp"
#include "tensorpool/graph/autodiff.hpp"
#include "tensorpool/graph/builder.hpp"
#include "tensorpool/graph/op_registry.hpp"
#include "tensorpool/graph/type_inference.hpp"
#include "tensorpool/ops/cast.hpp"

namespace tp::graph::testing {

using device::testing::Backend;
using device::testing::make_device;
using tp_test::expect_invalid;

// A value on the host: elements (as doubles, whatever the dtype), dtype and dims.
struct HostValue {
  std::vector<double> values;
  DType dtype = DType::f64;
  std::vector<std::int64_t> dims;
};

inline std::int64_t element_count(const std::vector<std::int64_t>& dims) {
  std::int64_t count = 1;
  for (std::int64_t dim : dims) count *= dim;
  return count;
}

// Uniform in [low, high), with |value| >= gap (keeps relu inputs away from the kink).
inline HostValue random_value(std::mt19937& rng, std::vector<std::int64_t> dims, double low = -1.0, double high = 1.0,
                              double gap = 0.0, DType dtype = DType::f64) {
  std::uniform_real_distribution<double> distribution(low, high);
  HostValue value{{}, dtype, std::move(dims)};
  for (std::int64_t index = 0; index < element_count(value.dims); ++index) {
    double element = distribution(rng);
    while (std::fabs(element) < gap) element = distribution(rng);
    value.values.push_back(element);
  }
  return value;
}

inline HostValue labels_value(std::mt19937& rng, std::int64_t rows, std::int64_t classes, DType dtype = DType::i64) {
  std::uniform_int_distribution<std::int64_t> distribution(0, classes - 1);
  HostValue value{{}, dtype, {rows}};
  for (std::int64_t row = 0; row < rows; ++row) value.values.push_back(static_cast<double>(distribution(rng)));
  return value;
}

inline Tensor to_tensor(const HostValue& value, device::Device& device) {
  const Shape shape(value.dims);
  switch (value.dtype) {
    case DType::f32: {
      std::vector<float> elements(value.values.begin(), value.values.end());
      return Tensor::from_vector<float>(elements, shape, device);
    }
    case DType::f16:
    case DType::bf16: {  // each value rounded once from its float32 value
      std::vector<float> elements(value.values.begin(), value.values.end());
      const Tensor rounded = tp::ops::cast(Tensor::from_vector<float>(elements, shape, device), value.dtype);
      device.synchronize();
      return rounded;
    }
    case DType::i32: {
      std::vector<std::int32_t> elements;
      for (double element : value.values) elements.push_back(static_cast<std::int32_t>(element));
      return Tensor::from_vector<std::int32_t>(elements, shape, device);
    }
    case DType::i64: {
      std::vector<std::int64_t> elements;
      for (double element : value.values) elements.push_back(static_cast<std::int64_t>(element));
      return Tensor::from_vector<std::int64_t>(elements, shape, device);
    }
    default: return Tensor::from_vector<double>(value.values, shape, device);
  }
}

inline std::vector<double> to_doubles(const Tensor& tensor) {
  switch (tensor.dtype()) {
    case DType::f16:
    case DType::bf16: {
      const std::vector<float> values = tp::ops::cast(tensor, DType::f32).to_vector<float>();
      return {values.begin(), values.end()};
    }
    case DType::f32: {
      const std::vector<float> values = tensor.to_vector<float>();
      return {values.begin(), values.end()};
    }
    case DType::i32: {
      const std::vector<std::int32_t> values = tensor.to_vector<std::int32_t>();
      return {values.begin(), values.end()};
    }
    case DType::i64: {
      const std::vector<std::int64_t> values = tensor.to_vector<std::int64_t>();
      return {values.begin(), values.end()};
    }
    default: return tensor.to_vector<double>();
  }
}

// Every node's outputs after one run.
using RunResult = std::vector<std::vector<Tensor>>;

// Runs every node in order on `device`'s stream 0. Placeholders and variables take their tensor from
// `bindings` (placeholder types are specialised from them through infer_types); other outputs are allocated
// with Tensor::empty and filled by the node's kernel for the device's kind. Waits for the device at the end.
inline RunResult run_graph(const Graph& graph, device::Device& device, const std::map<NodeId, Tensor>& bindings,
                           std::int64_t step = 1) {
  std::map<NodeId, TensorType> feeds;
  for (const auto& [id, tensor] : bindings) {
    if (graph.node(id).op == "Placeholder") feeds[id] = TensorType{tensor.dtype(), tensor.shape().dims_vector()};
  }
  const std::vector<std::vector<TensorType>> types = infer_types(graph, feeds);
  RunResult outputs(graph.size());
  for (const Node& node : graph.nodes()) {
    const auto id = static_cast<std::size_t>(node.id);
    if (node.op == "Placeholder" || node.op == "Variable") {
      outputs[id] = {bindings.at(node.id)};
      continue;
    }
    std::vector<Tensor> inputs;
    for (const Output& input : node.inputs) {
      inputs.push_back(outputs[static_cast<std::size_t>(input.node)][static_cast<std::size_t>(input.index)]);
    }
    for (const TensorType& type : types[id]) outputs[id].push_back(Tensor::empty(type.shape(), type.dtype, device));
    KernelContext context{node, inputs, outputs[id], device.stream(0), step};
    OpRegistry::global().get(node.op).kernels.at(device.kind())(context);
  }
  device.synchronize();
  return outputs;
}

inline std::map<NodeId, Tensor> to_tensors(const std::map<NodeId, HostValue>& values, device::Device& device) {
  std::map<NodeId, Tensor> tensors;
  for (const auto& [id, value] : values) tensors[id] = to_tensor(value, device);
  return tensors;
}

inline std::vector<double> fetch(const RunResult& result, Output output) {
  return to_doubles(result[static_cast<std::size_t>(output.node)][static_cast<std::size_t>(output.index)]);
}

// Sources for a gradient check: a Variable bound to a value (xs are variables, so no feed is needed).
inline Output bind_variable(Graph& graph, std::map<NodeId, HostValue>& values, std::string_view name, HostValue value) {
  const Output output = variable(graph, name, value.dtype, value.dims);
  values[output.node] = std::move(value);
  return output;
}

// Runs the graph on a cpu and a sim device; the fetched outputs must match exactly (the same kernels). On
// every other backend present (opencl) they must match the cpu's within the backend conformance suite's
// tolerance for the output's dtype, scaled by 1 + |cpu result|. Returns the cpu results.
inline std::vector<std::vector<double>> run_on_cpu_and_sim(const Graph& graph,
                                                           const std::map<NodeId, HostValue>& values,
                                                           const std::vector<Output>& fetches) {
  std::vector<std::vector<double>> results[2];
  for (Backend backend : {Backend::cpu, Backend::sim}) {
    auto device = make_device(backend);
    const RunResult run = run_graph(graph, *device, to_tensors(values, *device));
    for (Output output : fetches) results[backend == Backend::cpu ? 0 : 1].push_back(fetch(run, output));
  }
  EXPECT_EQ(results[0], results[1]) << "cpu and sim disagree";
  for (const Backend backend : device::testing::present_backends()) {
    if (backend == Backend::cpu || backend == Backend::sim) continue;
    auto device = make_device(backend);
    const RunResult run = run_graph(graph, *device, to_tensors(values, *device));
    for (std::size_t index = 0; index < fetches.size(); ++index) {
      const std::vector<double>& expected = results[0][index];
      std::vector<double> scale;
      for (const double value : expected) scale.push_back(1.0 + std::fabs(value));
      backend::testing::expect_close(
          std::string(device::testing::backend_label(backend)) + " vs cpu, fetch " + std::to_string(index),
          fetch(run, fetches[index]), expected, backend::testing::tolerance_of(graph.type_of(fetches[index]).dtype),
          &scale);
    }
  }
  return results[0];
}

// A graph under construction with the host values of its bound variables and a seeded generator: the state
// the kernel tests share (derive a fixture from it; TestBase is ::testing::Test or a TestWithParam).
template <typename TestBase = ::testing::Test>
class GraphValuesTest : public TestBase {
 protected:
  Output bind(std::string_view name, HostValue value) { return bind_variable(graph_, values_, name, value); }
  const std::vector<double>& host(Output output) { return values_.at(output.node).values; }
  Graph graph_;
  std::map<NodeId, HostValue> values_;
  std::mt19937 rng_{tp_test::test_seed()};
};

// Reduces `out` to a scalar as sum(Mean(out * weights)) with fixed random weights, so each element of `out`
// gets its own gradient. Alternates Sum and Mean over the leading axis.
inline Output weighted_scalar(Graph& graph, std::map<NodeId, HostValue>& values, Output out, std::mt19937& rng) {
  const TensorType type = graph.type_of(out);
  const Output weights = bind_variable(graph, values, "weights", random_value(rng, type.dims, 0.5, 1.5));
  Output reduced = graph.add("Mul", {out, weights});
  for (std::size_t axis = 0; axis < type.dims.size(); ++axis) {
    reduced = graph.add(axis % 2 == 0 ? "Sum" : "Mean", {reduced}, {{"axis", std::int64_t{0}}});
  }
  return reduced;
}

// Checks autodiff's gradients of scalar `y` with respect to each x (a bound Variable) against central finite
// differences (step h) of the forward graph, elementwise within rel * max(|analytic|, |numeric|) + abs.
inline void expect_gradients_match(Graph graph, Output y, const std::vector<Output>& xs,
                                   const std::map<NodeId, HostValue>& values, double rel = 1e-6, double abs = 1e-9,
                                   double h = 1e-6) {
  const Graph forward = graph;
  const std::vector<std::optional<Output>> grads = gradients(graph, y, xs);
  ASSERT_EQ(grads.size(), xs.size());
  graph.validate();
  auto device = make_device(Backend::cpu);
  const RunResult analytic_run = run_graph(graph, *device, to_tensors(values, *device));
  for (std::size_t x = 0; x < xs.size(); ++x) {
    SCOPED_TRACE(::testing::Message() << "x = '" << graph.node(xs[x].node).name << "'");
    ASSERT_TRUE(grads[x].has_value());
    const std::vector<double> analytic = fetch(analytic_run, *grads[x]);
    const HostValue& base = values.at(xs[x].node);
    ASSERT_EQ(analytic.size(), base.values.size());
    for (std::size_t element = 0; element < base.values.size(); ++element) {
      std::map<NodeId, HostValue> shifted = values;
      shifted[xs[x].node].values[element] = base.values[element] + h;
      const double plus = fetch(run_graph(forward, *device, to_tensors(shifted, *device)), y)[0];
      shifted[xs[x].node].values[element] = base.values[element] - h;
      const double minus = fetch(run_graph(forward, *device, to_tensors(shifted, *device)), y)[0];
      const double numeric = (plus - minus) / (2 * h);
      const double tolerance = rel * std::max(std::fabs(analytic[element]), std::fabs(numeric)) + abs;
      EXPECT_NEAR(analytic[element], numeric, tolerance) << "element " << element;
    }
  }
}

}  // namespace tp::graph::testing

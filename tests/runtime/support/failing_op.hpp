#pragma once
// "TestFailOnNegative": an op (cpu and sim kernels) that copies its one-element float input, and whose task
// throws tp::InvalidArgument ("negative input") on the device's stream when the input is negative: a kernel
// error that surfaces only once the stream runs it, for the session's error-path tests.

#include "tensorpool/core/error.hpp"
#include "tensorpool/graph/op_registry.hpp"

namespace tp::runtime::testing {

inline void register_fail_on_negative() {
  graph::OpRegistry& registry = graph::OpRegistry::global();
  if (registry.find("TestFailOnNegative") != nullptr) return;
  graph::OpDef fail;
  fail.name = "TestFailOnNegative";
  fail.num_inputs = 1;
  fail.infer = [](const graph::InferenceContext& context) { return context.inputs; };
  auto kernel = [](graph::KernelContext& context) {
    const Tensor input = context.inputs[0];
    const Tensor output = context.outputs[0];
    context.stream.enqueue([input, output] {
      if (input.data<float>()[0] < 0) TP_THROW(InvalidArgument, "test", "negative input");
      output.data<float>()[0] = input.data<float>()[0];
    });
  };
  fail.kernels[device::DeviceKind::cpu] = kernel;
  fail.kernels[device::DeviceKind::sim] = kernel;
  registry.add(std::move(fail));
}

}  // namespace tp::runtime::testing

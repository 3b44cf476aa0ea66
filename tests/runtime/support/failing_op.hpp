// SPDX-License-Identifier: Apache-2.0
#pragma once
// "TestFailOnNegative": an op (kernels for every device kind) that copies its one-element float input, and
// whose task throws tp::InvalidArgument ("negative input") on the device's stream when the input is negative:
// a kernel error that surfaces only once the stream runs it, for the session's error-path tests. It reaches
// the input only through the device's copies, so it runs on device memory host code cannot touch (opencl).

#include <cstring>

#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
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
    device::Stream& stream = context.stream;
    // In stream order: the input's bytes reach the host, the check runs (and throws), then the copy.
    const device::HostReadback value =
        stream.device().read_to_host_async(stream, input.buffer(), input.offset_bytes(), sizeof(float));
    stream.enqueue([value] {
      float seen = 0;
      std::memcpy(&seen, value.bytes.get(), sizeof seen);
      if (seen < 0) TP_THROW(InvalidArgument, "test", "negative input");
    });
    device::copy(stream, input.buffer(), input.offset_bytes(), stream, output.buffer(), output.offset_bytes(),
                 sizeof(float));
  };
  for (const device::DeviceKind kind : device::kDeviceKinds) fail.kernels[kind] = kernel;
  registry.add(std::move(fail));
}

}  // namespace tp::runtime::testing

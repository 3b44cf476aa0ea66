// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a layer above graph needs to define ops of its own (distribute's collectives), with the same helpers
// the built-in ops use (src/graph/ops/).
//
// The contract of an op defined outside graph: its layer adds it with OpRegistry::add (once per process:
// add refuses a name that is taken) before any graph adds a node of it, and does so from code that the
// node's builder calls, never from a static initialiser (a static library may drop it). The graph layer
// neither knows nor registers such ops: OpRegistry::global() starts with the built-in ones only.

#include <functional>
#include <map>
#include <string_view>

#include "tensorpool/device/device_id.hpp"
#include "tensorpool/graph/op_registry.hpp"

namespace tp::graph {

using Kernel = std::function<void(KernelContext&)>;
using Kernels = std::map<device::DeviceKind, Kernel>;  // OpDef::kernels

// The same kernel for every DeviceKind: the tensor ops it calls dispatch on the tensors' device to the kernels
// its backend registered (ops/kernel_table.hpp); the placer keeps nodes off a device whose backend has none.
[[nodiscard]] Kernels every_backend(const Kernel& kernel);

// Type inference: input `index` (called `role` in the message) must be float32, float64, float16 or bfloat16;
// otherwise throws tp::InvalidArgument "[graph] <op> '<node>': <role> is <type>; this op takes ...".
void require_float_or_half(const InferenceContext& context, int index, std::string_view role);

}  // namespace tp::graph

// SPDX-License-Identifier: Apache-2.0
#include "ops/peer_sum.hpp"

#include <utility>
#include <vector>

#include "ops/op_support.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::ops {

namespace {

constexpr std::string_view kOp = "SumAcrossPeers";

void check_reachable(const Tensor& tensor, const device::Device& device, const char* role) {
  if (!tensor.defined()) TP_THROW(InvalidArgument, "ops", kOp, ": every ", role, " must be defined");
  if (&tensor.device() != &device && !device::peer_accessible(tensor.device(), device)) {
    TP_THROW(InvalidArgument, "ops", kOp, ": an ", role, " is on ", tensor.device().name(), ", which ", device.name(),
             " (outputs[0]'s device) cannot reach directly");
  }
}

}  // namespace

void sum_across_peers(std::span<const Tensor> outputs, std::span<const Tensor> inputs, const OpContext& context) {
  if (outputs.empty() || inputs.empty()) TP_THROW(InvalidArgument, "ops", kOp, ": no outputs or no inputs");
  const Tensor& first = outputs[0];
  check_reachable(first, first.device(), "output");
  detail::require_floating_or_half(kOp, {"output", first});
  for (const auto& [tensors, role] : {std::pair{outputs, "output"}, std::pair{inputs, "input"}}) {
    for (const Tensor& tensor : tensors) {
      check_reachable(tensor, first.device(), role);
      detail::require_same_dtype(kOp, {"outputs[0]", first}, {role, tensor});
      detail::require_shape(kOp, {role, tensor}, first.shape());
    }
  }
  device::Stream& stream = detail::stream_for(kOp, first.device(), context);
  detail::kernel(first.device(), &kernels::KernelTable::sum_across_peers, kOp)(
      stream, kernels::SumAcrossPeersArgs{.outputs = std::vector<Tensor>(outputs.begin(), outputs.end()),
                                          .inputs = std::vector<Tensor>(inputs.begin(), inputs.end())});
}

}  // namespace tp::ops

#include "ops/peer_sum.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/kernels/elementwise.hpp"
#include "backend/cpu/kernels/half_nn.hpp"
#include "ops/op_support.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::ops {

namespace {

constexpr std::string_view kOp = "SumAcrossPeers";

// Each tensor's address, taken inside the running device's task (a peer's under a PeerAccessScope of it).
template <typename T>
std::vector<T*> addresses(const std::vector<Tensor>& tensors) {
  std::vector<T*> result;
  for (const Tensor& tensor : tensors) {
    const device::PeerAccessScope peer(tensor.device());
    result.push_back(tensor.data<T>());
  }
  return result;
}

// Block by block: the first input copied to a block on the stack, the others added to it in order with the
// one-addition kernel `add` (so the rounding is add_scaled's), then the block stored to every output.
// Reading every input of a block before storing it lets an output be one of the inputs.
template <typename T, typename Add>
void sum_blocks(const std::vector<T*>& outputs, const std::vector<T*>& inputs, std::int64_t n, Add add) {
  constexpr std::int64_t kBlock = 2048;
  std::array<T, kBlock> sum;
  for (std::int64_t offset = 0; offset < n; offset += kBlock) {
    const std::int64_t count = std::min(kBlock, n - offset);
    const auto bytes = static_cast<std::size_t>(count) * sizeof(T);
    std::memcpy(sum.data(), inputs[0] + offset, bytes);
    for (std::size_t index = 1; index < inputs.size(); ++index) add(sum.data(), inputs[index] + offset, count);
    for (T* output : outputs) std::memcpy(output + offset, sum.data(), bytes);
  }
}

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
  std::vector<Tensor> targets(outputs.begin(), outputs.end());
  std::vector<Tensor> sources(inputs.begin(), inputs.end());
  const std::int64_t n = first.num_elements();
  if (detail::is_half(first.dtype())) {
    detail::dispatch_half(first.dtype(), [&]<typename H>(H) {
      stream.enqueue([targets, sources, n] {
        sum_blocks<H>(addresses<H>(targets), addresses<H>(sources), n, [](H* sum, const H* addend, std::int64_t count) {
          backend::cpu::add_scaled_half<H>(sum, 1.0F, addend, count);
        });
      });
    });
    return;
  }
  detail::dispatch_floating(first.dtype(), [&]<typename T>(T) {
    stream.enqueue([targets, sources, n] {
      sum_blocks<T>(addresses<T>(targets), addresses<T>(sources), n, [](T* sum, const T* addend, std::int64_t count) {
        backend::cpu::add_scaled<T>(sum, T{1}, addend, count);
      });
    });
  });
}

}  // namespace tp::ops

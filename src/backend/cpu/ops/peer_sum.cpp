// SPDX-License-Identifier: Apache-2.0
// SumAcrossPeers (ops/peer_sum.hpp): one task on the stream of outputs[0]'s device that reads every input and
// writes every output in place, a peer device's tensors under a PeerAccessScope of that device.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels/elementwise.hpp"
#include "backend/cpu/kernels/half_nn.hpp"
#include "backend/cpu/ops/dispatch.hpp"
#include "backend/cpu/ops/op_kernels.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::cpu::op_kernels {

namespace {

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

}  // namespace

void sum_across_peers(device::Stream& stream, const ops::kernels::SumAcrossPeersArgs& args) {
  const Tensor& first = args.outputs.at(0);
  const std::int64_t n = first.num_elements();
  if (is_half(first.dtype())) {
    dispatch_half(first.dtype(), [&]<typename H>(H) {
      stream.enqueue([targets = args.outputs, sources = args.inputs, n] {
        sum_blocks<H>(addresses<H>(targets), addresses<H>(sources), n, [](H* sum, const H* addend, std::int64_t count) {
          add_scaled_half<H>(sum, 1.0F, addend, count);
        });
      });
    });
    return;
  }
  dispatch_floating(first.dtype(), [&]<typename T>(T) {
    stream.enqueue([targets = args.outputs, sources = args.inputs, n] {
      sum_blocks<T>(addresses<T>(targets), addresses<T>(sources), n,
                    [](T* sum, const T* addend, std::int64_t count) { cpu::add_scaled<T>(sum, T{1}, addend, count); });
    });
  });
}

}  // namespace tp::backend::cpu::op_kernels

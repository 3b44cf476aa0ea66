// SPDX-License-Identifier: Apache-2.0
// Element-wise adapters on kernels/elementwise.cu and cast.cu: arithmetic, scale, add_scaled and the peers' sum,
// the broadcasts, activations and bias, casts, all-finite and fill. Semantics: the CPU kernels named beside
// each (as the OpenCL backend's launchers).
#include <algorithm>
#include <cstddef>
#include <vector>

#include "backend/cuda/cuda_error.hpp"
#include "backend/cuda/cuda_kernel_support.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda::adapters {

using support::address;
using support::check_launch;
using support::elements;
using support::enqueue;
using support::kernel_dtype;

namespace {

int arithmetic_code(ops::Arithmetic op) {
  switch (op) {
    case ops::Arithmetic::add: return 0;
    case ops::Arithmetic::sub: return 1;
    case ops::Arithmetic::mul: return 2;
    case ops::Arithmetic::div: return 3;
  }
  TP_THROW(InvalidArgument, support::kComponent, "binary: op ", static_cast<int>(op), " is not an ops::Arithmetic");
}

// Whether two tensors are the same bytes.
bool same_view(const Tensor& a, const Tensor& b) { return a.data() == b.data() && a.nbytes() == b.nbytes(); }

}  // namespace

// cpu::binary, binary_row_broadcast, binary_scalar.
void binary(device::Stream& stream, const BinaryArgs& args) {
  const int op = arithmetic_code(args.op);
  const int broadcast = args.broadcast == BinaryBroadcast::same ? 0 : args.broadcast == BinaryBroadcast::row ? 1 : 2;
  const std::int64_t cols = args.broadcast == BinaryBroadcast::row ? args.y.shape().dim(0) : 1;
  enqueue(stream, [args, op, broadcast, cols](cudaStream_t native) {
    check_launch(kernels::launch_binary(kernel_dtype(args.x.dtype()), op, broadcast, address(args.x), address(args.y),
                                        address(args.out), elements(args.x), cols, native),
                 "launch_binary");
  });
}

// cpu::scale: out = x * T(alpha).
void scale(device::Stream& stream, const ScaleArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    check_launch(kernels::launch_scale(kernel_dtype(args.x.dtype()), address(args.x), args.alpha, address(args.out),
                                       elements(args.x), native),
                 "launch_scale");
  });
}

// cpu::add_scaled, add_scaled_half. x may be on a peer: its address is reached through unified addressing.
void add_scaled(device::Stream& stream, const AddScaledArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    check_launch(kernels::launch_add_scaled(kernel_dtype(args.y.dtype()), address(args.y), args.alpha,
                                            support::peer_address(args.x), elements(args.y), native),
                 "launch_add_scaled");
  });
}

// ops::sum_across_peers: up to kPeerSumInputs inputs per pass into the first output (each addition rounded as
// add_scaled's), then copies into the other outputs. In the first pass every input element is read before the
// output's is written; with more inputs the passes accumulate in a temporary instead, so that an output that is
// one of the later inputs is still unread when the passes reach it.
void sum_across_peers(device::Stream& stream, const SumAcrossPeersArgs& args) {
  const Tensor& first = args.outputs.at(0);
  Tensor accumulator;
  if (args.inputs.size() > static_cast<std::size_t>(kernels::kPeerSumInputs) && first.num_elements() > 0) {
    accumulator = Tensor::empty(
        first.shape(), first.dtype(), stream.device(),
        TensorTag{
            .name = "sum_across_peers accumulator", .kind = memory::AllocationKind::temporary, .op = "SumAcrossPeers"});
  }
  enqueue(stream, [args, accumulator](cudaStream_t native) {
    const Tensor& output = args.outputs.at(0);
    const std::int64_t n = elements(output);
    if (n == 0 || args.inputs.empty()) return;
    const kernels::Dtype dtype = kernel_dtype(output.dtype());
    void* target = accumulator.defined() ? accumulator.data() : support::peer_address(output);
    std::size_t next = 0;
    bool first_pass = true;
    while (next < args.inputs.size()) {
      kernels::PeerSumInputs addends{};
      int count = 0;
      if (!first_pass) addends.inputs[count++] = target;
      while (count < kernels::kPeerSumInputs && next < args.inputs.size()) {
        addends.inputs[count++] = support::peer_address(args.inputs[next++]);
      }
      check_launch(kernels::launch_peer_sum(dtype, target, addends, count, n, native), "launch_peer_sum");
      first_pass = false;
    }
    for (const Tensor& other : args.outputs) {
      void* destination = support::peer_address(other);
      if (destination == target) continue;
      check(cudaMemcpyAsync(destination, target, output.nbytes(), cudaMemcpyDefault, native),
            "cudaMemcpyAsync (sum_across_peers output)");
    }
  });
}

// cpu::broadcast_axis with alpha = 1 (copy) or T(1) / T(axis) (mean), rounded in T as the CPU launcher does.
void broadcast_axis(device::Stream& stream, const BroadcastAxisArgs& args) {
  const AxisExtent extent = args.extent;
  double alpha = 1.0;
  if (args.mode == ops::BroadcastMode::mean) {
    alpha = args.x.dtype() == DType::f32 ? static_cast<double>(1.0F / static_cast<float>(extent.axis))
                                         : 1.0 / static_cast<double>(extent.axis);
  }
  enqueue(stream, [args, extent, alpha](cudaStream_t native) {
    check_launch(
        kernels::launch_broadcast_axis(kernel_dtype(args.x.dtype()), address(args.x), address(args.out), extent.axis,
                                       extent.inner, alpha, extent.outer * extent.axis * extent.inner, native),
        "launch_broadcast_axis");
  });
}

// cpu::scale_rows.
void scale_rows(device::Stream& stream, const ScaleRowsArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    const std::int64_t n = elements(args.x);
    if (n == 0) return;
    check_launch(kernels::launch_scale_rows(kernel_dtype(args.x.dtype()), address(args.x), address(args.s),
                                            address(args.out), args.x.shape().dim(1), n, native),
                 "launch_scale_rows");
  });
}

// cpu::cast: a byte copy between equal dtypes (NaN payloads and -0 kept), except bool, which normalises.
void cast(device::Stream& stream, const CastArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    const std::int64_t n = elements(args.x);
    if (n == 0) return;
    const DType from = args.x.dtype();
    const DType to = args.out.dtype();
    if (from == to && to != DType::boolean) {
      if (!same_view(args.x, args.out)) {
        check(cudaMemcpyAsync(args.out.data(), args.x.data(), args.x.nbytes(), cudaMemcpyDeviceToDevice, native),
              "cudaMemcpyAsync (cast)");
      }
      return;
    }
    check_launch(kernels::launch_cast(kernel_dtype(from), kernel_dtype(to), args.x.data(), args.out.data(), n, native),
                 "launch_cast");
  });
}

// cpu::all_finite: out = 1 unless some element's exponent bits are all ones.
void all_finite(device::Stream& stream, const AllFiniteArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    check_launch(kernels::launch_all_finite(kernel_dtype(args.x.dtype()), address(args.x),
                                            static_cast<float*>(args.out.data()), elements(args.x), native),
                 "launch_all_finite");
  });
}

// cpu::fill: the value rounded to T.
void fill(device::Stream& stream, const FillArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    check_launch(
        kernels::launch_fill(kernel_dtype(args.out.dtype()), address(args.out), args.value, elements(args.out), native),
        "launch_fill");
  });
}

// cpu::relu, relu_half.
void relu(device::Stream& stream, const ReluArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    check_launch(kernels::launch_relu(kernel_dtype(args.x.dtype()), address(args.x), address(args.out),
                                      elements(args.x), native),
                 "launch_relu");
  });
}

// cpu::relu_grad, relu_grad_half.
void relu_grad(device::Stream& stream, const ReluGradArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    check_launch(kernels::launch_relu_grad(kernel_dtype(args.x.dtype()), address(args.dy), address(args.x),
                                           address(args.dx), elements(args.x), native),
                 "launch_relu_grad");
  });
}

// cpu::bias_add, bias_add_half.
void bias_add(device::Stream& stream, const BiasAddArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    const std::int64_t n = elements(args.x);
    if (n == 0) return;
    check_launch(kernels::launch_bias_add(kernel_dtype(args.x.dtype()), address(args.x), address(args.bias),
                                          address(args.out), args.x.shape().dim(1), n, native),
                 "launch_bias_add");
  });
}

// cpu::bias_add_grad, bias_add_grad_half: one thread per column sums the rows in order.
void bias_add_grad(device::Stream& stream, const BiasAddGradArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    const std::int64_t cols = args.dy.shape().dim(1);
    if (cols == 0) return;
    check_launch(kernels::launch_bias_add_grad(kernel_dtype(args.dy.dtype()), address(args.dy), address(args.dbias),
                                               args.dy.shape().dim(0), cols, native),
                 "launch_bias_add_grad");
  });
}

}  // namespace tp::backend::cuda::adapters

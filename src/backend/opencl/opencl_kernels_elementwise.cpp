// SPDX-License-Identifier: Apache-2.0
// Element-wise launchers on kernels/elementwise.cl: arithmetic, scale, add_scaled and the peers' sum, the
// broadcasts, activations and bias, casts, all-finite and fill. Semantics: the CPU kernels named beside each.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "backend/opencl/opencl_kernel_support.hpp"
#include "backend/opencl/opencl_kernels.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::opencl::kernels {

namespace {

constexpr std::string_view kProgram = "elementwise";

// peer_sum's inputs per pass (the kernel's fixed argument list).
constexpr std::size_t kPeerSumInputs = 8;

cl_uint arithmetic_code(ops::Arithmetic op) {
  switch (op) {
    case ops::Arithmetic::add: return 0;
    case ops::Arithmetic::sub: return 1;
    case ops::Arithmetic::mul: return 2;
    case ops::Arithmetic::div: return 3;
  }
  TP_THROW(InvalidArgument, kComponent, "binary: op ", static_cast<int>(op), " is not an ops::Arithmetic");
}

}  // namespace

// cpu::binary, binary_row_broadcast, binary_scalar.
void binary(device::Stream& stream, const BinaryArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "binary", args.x.dtype());
    const cl_ulong n = elements(args.x);
    if (n == 0) return;
    const char* base = args.broadcast == BinaryBroadcast::same  ? "binary_same"
                       : args.broadcast == BinaryBroadcast::row ? "binary_row"
                                                                : "binary_scalar";
    cl_kernel kernel = context.kernel(kProgram, kernel_name(base, args.x.dtype()));
    KernelArguments arguments(kernel);
    arguments.value(arithmetic_code(args.op))
        .span(context.span(args.x))
        .span(context.span(args.y))
        .span(context.span(args.out))
        .value(n);
    if (args.broadcast == BinaryBroadcast::row) arguments.value(static_cast<cl_ulong>(args.y.shape().dim(0)));
    launch_items(context, kernel, n);
  });
}

// cpu::scale: out = x * T(alpha).
void scale(device::Stream& stream, const ScaleArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "scale", args.x.dtype());
    const cl_ulong n = elements(args.x);
    if (n == 0) return;
    cl_kernel kernel = context.kernel(kProgram, kernel_name("scale", args.x.dtype()));
    with_scalar_type(args.x.dtype(), [&]<typename T>(T) {
      KernelArguments(kernel)
          .span(context.span(args.x))
          .value(static_cast<T>(args.alpha))
          .span(context.span(args.out))
          .value(n);
    });
    launch_items(context, kernel, n);
  });
}

// cpu::add_scaled, add_scaled_half (float32 arithmetic, one rounding). x may be on a peer device of the same
// OpenCL context: its span is a buffer of that context.
void add_scaled(device::Stream& stream, const AddScaledArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "add_scaled", args.y.dtype());
    const cl_ulong n = elements(args.y);
    if (n == 0) return;
    cl_kernel kernel = context.kernel(kProgram, kernel_name("add_scaled", args.y.dtype()));
    with_scalar_type(args.y.dtype(), [&]<typename T>(T) {
      KernelArguments(kernel)
          .span(context.span(args.y))
          .value(static_cast<T>(args.alpha))
          .span(context.span(args.x))
          .value(n);
    });
    launch_items(context, kernel, n);
  });
}

// ops::sum_across_peers: up to 8 inputs per pass of peer_sum into the first output (each addition rounded as
// add_scaled's), then copies to the other outputs. Every input is read before the first output is written in
// the first pass; with more than 8 inputs the passes accumulate in a temporary instead, so that an output that
// is one of the later inputs is still unread when the passes reach it.
void sum_across_peers(device::Stream& stream, const SumAcrossPeersArgs& args) {
  const Tensor& first = args.outputs.at(0);
  Tensor accumulator;
  if (args.inputs.size() > kPeerSumInputs && first.num_elements() > 0) {
    accumulator = Tensor::empty(
        first.shape(), first.dtype(), stream.device(),
        TensorTag{
            .name = "sum_across_peers accumulator", .kind = memory::AllocationKind::temporary, .op = "SumAcrossPeers"});
  }
  enqueue(stream, [args, accumulator](LaunchContext& context) {
    const Tensor& output = args.outputs.at(0);
    require_fp64(context, "sum_across_peers", output.dtype());
    const cl_ulong n = elements(output);
    if (n == 0 || args.inputs.empty()) return;
    const DeviceSpan target = context.span(accumulator.defined() ? accumulator : output);
    cl_kernel kernel = context.kernel(kProgram, kernel_name("peer_sum", output.dtype()));
    // Pass p sums (the running total, or inputs[0] at first) and the next inputs, at most 8 addends.
    std::size_t next = 0;
    bool first_pass = true;
    while (next < args.inputs.size()) {
      std::vector<DeviceSpan> addends;
      if (!first_pass) addends.push_back(target);
      while (addends.size() < kPeerSumInputs && next < args.inputs.size()) {
        addends.push_back(context.span(args.inputs[next++]));
      }
      KernelArguments arguments(kernel);
      arguments.span(target).value(static_cast<cl_uint>(addends.size()));
      for (std::size_t slot = 0; slot < kPeerSumInputs; ++slot) {
        arguments.span(addends[std::min(slot, addends.size() - 1)]);
      }
      arguments.value(n);
      launch_items(context, kernel, n);
      first_pass = false;
    }
    const std::size_t bytes = output.nbytes();
    for (const Tensor& other : args.outputs) {
      const DeviceSpan span = context.span(other);
      if (!same_span(span, target)) copy_bytes(context, target, span, bytes);
    }
  });
}

// cpu::broadcast_axis with alpha = 1 (copy) or T(1) / T(axis) (mean), as the CPU launcher computes it.
void broadcast_axis(device::Stream& stream, const BroadcastAxisArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "broadcast_axis", args.x.dtype());
    const AxisExtent extent = args.extent;
    const auto n = static_cast<cl_ulong>(extent.outer * extent.axis * extent.inner);
    if (n == 0) return;
    cl_kernel kernel = context.kernel(kProgram, kernel_name("broadcast_axis", args.x.dtype()));
    with_scalar_type(args.x.dtype(), [&]<typename T>(T) {
      const T alpha = args.mode == ops::BroadcastMode::mean ? T{1} / static_cast<T>(extent.axis) : T{1};
      KernelArguments(kernel)
          .span(context.span(args.x))
          .span(context.span(args.out))
          .value(static_cast<cl_ulong>(extent.axis))
          .value(static_cast<cl_ulong>(extent.inner))
          .value(alpha)
          .value(n);
    });
    launch_items(context, kernel, n);
  });
}

// cpu::scale_rows.
void scale_rows(device::Stream& stream, const ScaleRowsArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "scale_rows", args.x.dtype());
    const cl_ulong n = elements(args.x);
    if (n == 0) return;
    cl_kernel kernel = context.kernel(kProgram, kernel_name("scale_rows", args.x.dtype()));
    KernelArguments(kernel)
        .span(context.span(args.x))
        .span(context.span(args.s))
        .span(context.span(args.out))
        .value(static_cast<cl_ulong>(args.x.shape().dim(1)))
        .value(n);
    launch_items(context, kernel, n);
  });
}

// cpu::cast: a byte copy between equal dtypes (NaN payloads and -0 kept), except bool, which normalises; a
// cast_<from>_<to> kernel otherwise.
void cast(device::Stream& stream, const CastArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    const DType from = args.x.dtype();
    const DType to = args.out.dtype();
    const cl_ulong n = elements(args.x);
    if (n == 0) return;
    const DeviceSpan source = context.span(args.x);
    const DeviceSpan target = context.span(args.out);
    if (from == to && to != DType::boolean) {
      if (!same_span(source, target)) copy_bytes(context, source, target, args.x.nbytes());
      return;
    }
    require_fp64(context, "cast", from);
    require_fp64(context, "cast", to);
    std::string name = "cast_";
    name += dtype_suffix(from);
    name += '_';
    name += dtype_suffix(to);
    cl_kernel kernel = context.kernel(kProgram, name);
    KernelArguments(kernel).span(source).span(target).value(n);
    launch_items(context, kernel, n);
  });
}

// cpu::all_finite: out = 1, then any element whose exponent bits are all ones stores 0. The bit tests need no
// float64 support.
void all_finite(device::Stream& stream, const AllFiniteArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    const DeviceSpan out = context.span(args.out);
    const cl_float one = 1.0F;
    fill_bytes(context, out, &one, sizeof(one), sizeof(one));
    const cl_ulong n = elements(args.x);
    if (n == 0) return;
    const DType dtype = args.x.dtype();
    const bool half = dtype == DType::f16 || dtype == DType::bf16;
    cl_kernel kernel = context.kernel(kProgram, half                  ? "all_finite_16"
                                                : dtype == DType::f32 ? "all_finite_32"
                                                                      : "all_finite_64");
    KernelArguments arguments(kernel);
    arguments.span(context.span(args.x));
    if (half) {
      arguments.value(static_cast<cl_ushort>(dtype == DType::f16 ? 0x7C00U : 0x7F80U));
    } else if (dtype == DType::f32) {
      arguments.value(static_cast<cl_uint>(0x7F80'0000U));
    } else {
      arguments.value(static_cast<cl_ulong>(0x7FF0'0000'0000'0000ULL));
    }
    arguments.span(out).value(n);
    // Each work-item strides over the elements: a bounded number of groups covers any n.
    constexpr std::uint64_t kMaxGroups = 1024;
    const std::size_t group = work_group_size(context, kernel);
    const auto groups = std::min<std::uint64_t>(kMaxGroups, (n + group - 1) / group);
    launch_groups(context, kernel, group, static_cast<std::size_t>(groups));
  });
}

// cpu::fill: the value rounded to T, written by the queue's fill command.
void fill(device::Stream& stream, const FillArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    const std::size_t bytes = args.out.nbytes();
    if (bytes == 0) return;
    const DeviceSpan out = context.span(args.out);
    with_scalar_type(args.out.dtype(), [&]<typename T>(T) {
      const T value = static_cast<T>(args.value);
      fill_bytes(context, out, &value, sizeof(value), bytes);
    });
  });
}

// cpu::relu, relu_half.
void relu(device::Stream& stream, const ReluArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "relu", args.x.dtype());
    const cl_ulong n = elements(args.x);
    if (n == 0) return;
    cl_kernel kernel = context.kernel(kProgram, kernel_name("relu", args.x.dtype()));
    KernelArguments(kernel).span(context.span(args.x)).span(context.span(args.out)).value(n);
    launch_items(context, kernel, n);
  });
}

// cpu::relu_grad, relu_grad_half.
void relu_grad(device::Stream& stream, const ReluGradArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "relu_grad", args.x.dtype());
    const cl_ulong n = elements(args.x);
    if (n == 0) return;
    cl_kernel kernel = context.kernel(kProgram, kernel_name("relu_grad", args.x.dtype()));
    KernelArguments(kernel).span(context.span(args.dy)).span(context.span(args.x)).span(context.span(args.dx)).value(n);
    launch_items(context, kernel, n);
  });
}

// cpu::bias_add, bias_add_half.
void bias_add(device::Stream& stream, const BiasAddArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "bias_add", args.x.dtype());
    const cl_ulong n = elements(args.x);
    if (n == 0) return;
    cl_kernel kernel = context.kernel(kProgram, kernel_name("bias_add", args.x.dtype()));
    KernelArguments(kernel)
        .span(context.span(args.x))
        .span(context.span(args.bias))
        .span(context.span(args.out))
        .value(static_cast<cl_ulong>(args.x.shape().dim(1)))
        .value(n);
    launch_items(context, kernel, n);
  });
}

// cpu::bias_add_grad, bias_add_grad_half: one work-item per column sums the rows in order.
void bias_add_grad(device::Stream& stream, const BiasAddGradArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "bias_add_grad", args.dy.dtype());
    const auto cols = static_cast<cl_ulong>(args.dy.shape().dim(1));
    if (cols == 0) return;
    cl_kernel kernel = context.kernel(kProgram, kernel_name("bias_add_grad", args.dy.dtype()));
    KernelArguments(kernel)
        .span(context.span(args.dy))
        .span(context.span(args.dbias))
        .value(static_cast<cl_ulong>(args.dy.shape().dim(0)))
        .value(cols);
    launch_items(context, kernel, cols);
  });
}

}  // namespace tp::backend::opencl::kernels

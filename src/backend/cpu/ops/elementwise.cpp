// SPDX-License-Identifier: Apache-2.0
// Binary arithmetic, Scale and AddScaled on the CPU kernels of backend/cpu/kernels/elementwise.hpp (float32,
// float64) and half_nn.hpp (AddScaled of float16 / bfloat16, summed in float32).
#include "backend/cpu/kernels/elementwise.hpp"
#include "backend/cpu/kernels/half_nn.hpp"
#include "backend/cpu/ops/dispatch.hpp"
#include "backend/cpu/ops/op_kernels.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::cpu::op_kernels {

namespace {

BinaryOp kernel_op(ops::Arithmetic op) {
  switch (op) {
    case ops::Arithmetic::add: return BinaryOp::add;
    case ops::Arithmetic::sub: return BinaryOp::sub;
    case ops::Arithmetic::mul: return BinaryOp::mul;
    case ops::Arithmetic::div: return BinaryOp::div;
  }
  return BinaryOp::add;
}

}  // namespace

void binary(device::Stream& stream, const ops::kernels::BinaryArgs& args) {
  const BinaryOp kernel = kernel_op(args.op);
  dispatch_floating(args.x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x = args.x, y = args.y, out = args.out, kernel, broadcast = args.broadcast] {
      const std::int64_t n = x.num_elements();
      switch (broadcast) {
        case ops::kernels::BinaryBroadcast::same:
          cpu::binary<T>(kernel, x.data<T>(), y.data<T>(), out.data<T>(), n);
          break;
        case ops::kernels::BinaryBroadcast::row: {
          const std::int64_t cols = y.shape().dim(0);
          binary_row_broadcast<T>(kernel, x.data<T>(), y.data<T>(), out.data<T>(), cols == 0 ? 0 : n / cols, cols);
          break;
        }
        case ops::kernels::BinaryBroadcast::scalar:
          binary_scalar<T>(kernel, x.data<T>(), y.data<T>()[0], out.data<T>(), n);
          break;
      }
    });
  });
}

void scale(device::Stream& stream, const ops::kernels::ScaleArgs& args) {
  dispatch_floating(args.x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x = args.x, alpha = args.alpha, out = args.out] {
      cpu::scale<T>(x.data<T>(), static_cast<T>(alpha), out.data<T>(), x.num_elements());
    });
  });
}

// x may live on a peer of y's device: the task reads it in place under a PeerAccessScope of x's device.
void add_scaled(device::Stream& stream, const ops::kernels::AddScaledArgs& args) {
  if (is_half(args.y.dtype())) {  // the collectives' reduction of 16-bit gradients: summed in float32
    dispatch_half(args.y.dtype(), [&]<typename H>(H) {
      stream.enqueue([y = args.y, alpha = args.alpha, x = args.x] {
        const device::PeerAccessScope peer(x.device());
        add_scaled_half<H>(y.data<H>(), static_cast<float>(alpha), x.data<H>(), y.num_elements());
      });
    });
    return;
  }
  dispatch_floating(args.y.dtype(), [&]<typename T>(T) {
    stream.enqueue([y = args.y, alpha = args.alpha, x = args.x] {
      const device::PeerAccessScope peer(x.device());
      cpu::add_scaled<T>(y.data<T>(), static_cast<T>(alpha), x.data<T>(), y.num_elements());
    });
  });
}

}  // namespace tp::backend::cpu::op_kernels

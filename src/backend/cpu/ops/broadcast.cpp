// SPDX-License-Identifier: Apache-2.0
// BroadcastAxis and ScaleRows on backend/cpu/kernels/broadcast.hpp (float32, float64).
#include "backend/cpu/kernels/broadcast.hpp"
#include "backend/cpu/ops/dispatch.hpp"
#include "backend/cpu/ops/op_kernels.hpp"

namespace tp::backend::cpu::op_kernels {

void broadcast_axis(device::Stream& stream, const ops::kernels::BroadcastAxisArgs& args) {
  const ops::kernels::AxisExtent extent = args.extent;
  dispatch_floating(args.x.dtype(), [&]<typename T>(T) {
    // The mean of an empty axis writes nothing, so its 1 / 0 is never used.
    const T alpha =
        args.mode == ops::BroadcastMode::mean && extent.axis > 0 ? T{1} / static_cast<T>(extent.axis) : T{1};
    stream.enqueue([x = args.x, out = args.out, extent, alpha] {
      cpu::broadcast_axis<T>(x.data<T>(), out.data<T>(), extent.outer, extent.axis, extent.inner, alpha);
    });
  });
}

void scale_rows(device::Stream& stream, const ops::kernels::ScaleRowsArgs& args) {
  dispatch_floating(args.x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x = args.x, s = args.s, out = args.out] {
      cpu::scale_rows<T>(x.data<T>(), s.data<T>(), out.data<T>(), x.shape().dim(0), x.shape().dim(1));
    });
  });
}

}  // namespace tp::backend::cpu::op_kernels

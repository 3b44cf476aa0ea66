// SPDX-License-Identifier: Apache-2.0
// Sum, Mean, Max and ArgMax over one axis on backend/cpu/kernels/reduce.hpp (float32, float64).
#include "backend/cpu/kernels/reduce.hpp"
#include "backend/cpu/ops/dispatch.hpp"
#include "backend/cpu/ops/op_kernels.hpp"

namespace tp::backend::cpu::op_kernels {

void reduce(device::Stream& stream, const ops::kernels::ReduceArgs& args) {
  dispatch_floating(args.x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x = args.x, out = args.out, extent = args.extent, reduction = args.reduction] {
      switch (reduction) {
        case ops::Reduction::sum:
          reduce_sum<T>(x.data<T>(), out.data<T>(), extent.outer, extent.axis, extent.inner);
          break;
        case ops::Reduction::mean:
          reduce_mean<T>(x.data<T>(), out.data<T>(), extent.outer, extent.axis, extent.inner);
          break;
        case ops::Reduction::max:
          reduce_max<T>(x.data<T>(), out.data<T>(), extent.outer, extent.axis, extent.inner);
          break;
      }
    });
  });
}

void argmax(device::Stream& stream, const ops::kernels::ArgMaxArgs& args) {
  dispatch_floating(args.x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x = args.x, out = args.out, extent = args.extent] {
      cpu::argmax<T>(x.data<T>(), out.data<std::int64_t>(), extent.outer, extent.axis, extent.inner);
    });
  });
}

}  // namespace tp::backend::cpu::op_kernels

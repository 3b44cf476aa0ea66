// SPDX-License-Identifier: Apache-2.0
// AllFinite on backend/cpu/kernels/finite.hpp (float32, float64, float16, bfloat16).
#include "backend/cpu/kernels/finite.hpp"
#include "backend/cpu/ops/dispatch.hpp"
#include "backend/cpu/ops/op_kernels.hpp"

namespace tp::backend::cpu::op_kernels {

void all_finite(device::Stream& stream, const ops::kernels::AllFiniteArgs& args) {
  const auto enqueue = [&]<typename T>(T) {
    stream.enqueue([x = args.x, out = args.out] {
      *out.data<float>() = cpu::all_finite<T>(x.data<T>(), x.num_elements()) ? 1.0F : 0.0F;
    });
  };
  if (is_half(args.x.dtype())) {
    dispatch_half(args.x.dtype(), enqueue);
  } else {
    dispatch_floating(args.x.dtype(), enqueue);
  }
}

}  // namespace tp::backend::cpu::op_kernels

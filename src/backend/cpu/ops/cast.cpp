// SPDX-License-Identifier: Apache-2.0
// Cast on backend/cpu/kernels/cast.hpp (every pair of dtypes).
#include "backend/cpu/kernels/cast.hpp"
#include "backend/cpu/ops/op_kernels.hpp"

namespace tp::backend::cpu::op_kernels {

void cast(device::Stream& stream, const ops::kernels::CastArgs& args) {
  stream.enqueue(
      [x = args.x, out = args.out] { cpu::cast(x.data(), x.dtype(), out.data(), out.dtype(), x.num_elements()); });
}

}  // namespace tp::backend::cpu::op_kernels

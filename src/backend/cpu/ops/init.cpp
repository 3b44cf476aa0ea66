// SPDX-License-Identifier: Apache-2.0
// Fill and the seeded initialisers on backend/cpu/kernels/random.hpp (float32, float64).
#include "backend/cpu/kernels/random.hpp"
#include "backend/cpu/ops/dispatch.hpp"
#include "backend/cpu/ops/op_kernels.hpp"

namespace tp::backend::cpu::op_kernels {

void fill(device::Stream& stream, const ops::kernels::FillArgs& args) {
  dispatch_floating(args.out.dtype(), [&]<typename T>(T) {
    stream.enqueue([out = args.out, value = args.value] {
      cpu::fill<T>(out.data<T>(), out.num_elements(), static_cast<T>(value));
    });
  });
}

void random(device::Stream& stream, const ops::kernels::RandomArgs& args) {
  dispatch_floating(args.out.dtype(), [&]<typename T>(T) {
    stream.enqueue([args] {
      const Tensor& out = args.out;
      switch (args.distribution) {
        case ops::kernels::Distribution::uniform:
          uniform<T>(out.data<T>(), out.num_elements(), static_cast<T>(args.a), static_cast<T>(args.b), args.seed,
                     args.offset);
          break;
        case ops::kernels::Distribution::normal:
          normal<T>(out.data<T>(), out.num_elements(), static_cast<T>(args.a), static_cast<T>(args.b), args.seed,
                    args.offset);
          break;
        case ops::kernels::Distribution::glorot_uniform:  // offset 0 by definition (random.hpp)
          glorot_uniform<T>(out.data<T>(), out.shape().dim(0), out.shape().dim(1), args.seed);
          break;
      }
    });
  });
}

}  // namespace tp::backend::cpu::op_kernels

// SPDX-License-Identifier: Apache-2.0
// MatMul on backend/cpu/kernels/gemm.hpp (float32, float64) and half_nn.hpp (float16 / bfloat16, converted
// to float32 around the float32 GEMM and stored back), with the GEMM library of the stream's device.
#include "backend/cpu/kernel_settings.hpp"
#include "backend/cpu/kernels/gemm.hpp"
#include "backend/cpu/kernels/half_nn.hpp"
#include "backend/cpu/ops/dispatch.hpp"
#include "backend/cpu/ops/op_kernels.hpp"

namespace tp::backend::cpu::op_kernels {

void matmul(device::Stream& stream, const ops::kernels::MatmulArgs& args) {
  const Transpose transpose_a = args.transpose_a ? Transpose::yes : Transpose::no;
  const Transpose transpose_b = args.transpose_b ? Transpose::yes : Transpose::no;
  const std::int64_t m = args.m, n = args.n, k = args.k;
  const GemmLibrary library = gemm_library_of(stream.device());  // the device's setting at launch
  if (is_half(args.a.dtype())) {
    dispatch_half(args.a.dtype(), [&]<typename H>(H) {
      stream.enqueue([a = args.a, b = args.b, out = args.out, transpose_a, transpose_b, m, n, k, library] {
        matmul_half<H>(transpose_a, transpose_b, m, n, k, a.data<H>(), b.data<H>(), out.data<H>(), library);
      });
    });
    return;
  }
  dispatch_floating(args.a.dtype(), [&]<typename T>(T) {
    stream.enqueue([a = args.a, b = args.b, out = args.out, transpose_a, transpose_b, m, n, k, library] {
      cpu::matmul<T>(transpose_a, transpose_b, m, n, k, T{1}, a.data<T>(), b.data<T>(), T{0}, out.data<T>(), library);
    });
  });
}

}  // namespace tp::backend::cpu::op_kernels

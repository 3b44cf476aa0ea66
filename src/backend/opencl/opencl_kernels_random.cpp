// SPDX-License-Identifier: Apache-2.0
// The seeded initialisers on kernels/random.cl (Philox4x32-10, keyed as backend/cpu/kernels/random.hpp), with
// the CPU kernels' argument checks and glorot_uniform's limit computed as the CPU computes it.
#include <cmath>
#include <limits>

#include "backend/opencl/opencl_kernel_support.hpp"
#include "backend/opencl/opencl_kernels.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::opencl::kernels {

namespace {

constexpr std::string_view kProgram = "random";

// The element indices offset .. offset + n - 1 must fit in 64 bits.
void check_range(std::string_view kernel, std::uint64_t n, std::uint64_t offset) {
  if (offset > std::numeric_limits<std::uint64_t>::max() - n) {
    TP_THROW(InvalidArgument, kComponent, kernel, ": offset ", offset, " + n ", n,
             " overflows the 64-bit element index");
  }
}

template <typename T>
void check_uniform(T low, T high) {
  const double width = static_cast<double>(high) - static_cast<double>(low);
  if (!std::isfinite(low) || !std::isfinite(high) || !(low <= high) || !std::isfinite(width)) {
    TP_THROW(InvalidArgument, kComponent, "uniform: range [low = ", low, ", high = ", high,
             ") must be finite with low <= high and a finite width");
  }
}

template <typename T>
void check_normal(T mean, T stddev) {
  if (!std::isfinite(mean) || !std::isfinite(stddev) || stddev < 0) {
    TP_THROW(InvalidArgument, kComponent, "normal: mean = ", mean, ", stddev = ", stddev,
             " must be finite with stddev >= 0");
  }
}

}  // namespace

void random(device::Stream& stream, const RandomArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    const DType dtype = args.out.dtype();
    require_fp64(context, "random", dtype);
    const cl_ulong n = elements(args.out);
    with_scalar_type(dtype, [&]<typename T>(T) {
      T a = static_cast<T>(args.a);
      T b = static_cast<T>(args.b);
      std::uint64_t offset = args.offset;
      const char* base = "uniform";
      switch (args.distribution) {
        case Distribution::uniform:
          check_range(base, n, offset);
          check_uniform(a, b);
          break;
        case Distribution::normal:
          base = "normal";
          check_range(base, n, offset);
          check_normal(a, b);
          break;
        case Distribution::glorot_uniform: {
          // Keras's GlorotUniform for a [fan_in, fan_out] kernel: uniform in [-limit, limit), offset 0.
          if (n == 0) return;  // keeps 6 / (0 + 0) out of the limit
          const double fan_in = static_cast<double>(args.out.shape().dim(0));
          const double fan_out = static_cast<double>(args.out.shape().dim(1));
          const double limit = std::sqrt(6.0 / (fan_in + fan_out));
          a = static_cast<T>(-limit);
          b = static_cast<T>(limit);
          offset = 0;
          break;
        }
      }
      if (n == 0) return;
      cl_kernel kernel = context.kernel(kProgram, kernel_name(base, dtype));
      KernelArguments(kernel)
          .span(context.span(args.out))
          .value(a)
          .value(b)
          .value(static_cast<cl_uint>(args.seed))
          .value(static_cast<cl_uint>(args.seed >> 32))
          .value(static_cast<cl_ulong>(offset))
          .value(n);
      launch_items(context, kernel, n);
    });
  });
}

}  // namespace tp::backend::opencl::kernels

// SPDX-License-Identifier: Apache-2.0
// SGD and Adam on kernels/optimizer.cl, with the hyperparameters rounded to T and Adam's alpha computed in
// double exactly as backend/cpu/kernels/optimizer.cpp computes them. The apply flag stays on the device: the
// kernel reads it when it runs. The multi-tensor forms run the same kernels, one enqueue per entry in one task.
#include <cmath>
#include <string>

#include "backend/opencl/opencl_kernel_support.hpp"
#include "backend/opencl/opencl_kernels.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::opencl::kernels {

namespace {

constexpr std::string_view kProgram = "optimizer";

// "sgd_float_f16": the kernel for parameters of `param` (float or double) and a gradient of `grad`.
std::string optimizer_kernel(std::string_view base, DType param, DType grad) {
  std::string name(base);
  name += param == DType::f64 ? "_double_" : "_float_";
  name += dtype_suffix(grad);
  return name;
}

template <typename T>
void check_beta(std::string_view name, T beta) {
  if (!(beta >= T{0} && beta < T{1})) {
    TP_THROW(InvalidArgument, kComponent, "adam_update: ", name, " = ", beta, " is outside [0, 1)");
  }
}

// One SGD launch on `context`'s queue: SgdArgs' semantics.
void launch_sgd(LaunchContext& context, const SgdArgs& args) {
  require_fp64(context, "sgd_update", args.param.dtype());
  const bool has_velocity = args.velocity.defined();
  if (!has_velocity && args.options.momentum != 0.0) {
    TP_THROW(InvalidArgument, kComponent, "sgd_update: momentum = ", args.options.momentum,
             " needs a velocity buffer, but velocity is undefined");
  }
  const cl_ulong n = elements(args.param);
  if (n == 0) return;
  cl_kernel kernel = context.kernel(kProgram, optimizer_kernel("sgd", args.param.dtype(), args.grad.dtype()));
  const DeviceSpan param = context.span(args.param);
  with_scalar_type(args.param.dtype(), [&]<typename T>(T) {
    KernelArguments(kernel)
        .span(args.apply.defined() ? context.span(args.apply) : param)  // unused without a flag
        .value(static_cast<cl_uint>(args.apply.defined() ? 1 : 0))
        .span(param)
        .span(context.span(args.grad))
        .span(has_velocity ? context.span(args.velocity) : param)  // unused without momentum
        .value(static_cast<cl_uint>(has_velocity ? 1 : 0))
        .value(static_cast<T>(args.options.learning_rate))
        .value(static_cast<T>(args.options.momentum))
        .value(static_cast<cl_uint>(args.options.nesterov ? 1 : 0))
        .value(n);
  });
  launch_items(context, kernel, n);
}

// One Adam launch on `context`'s queue: AdamArgs' semantics.
void launch_adam(LaunchContext& context, const AdamArgs& args) {
  require_fp64(context, "adam_update", args.param.dtype());
  if (args.step < 1) TP_THROW(InvalidArgument, kComponent, "adam_update: step = ", args.step, " must be >= 1");
  const cl_ulong n = elements(args.param);
  cl_kernel kernel = context.kernel(kProgram, optimizer_kernel("adam", args.param.dtype(), args.grad.dtype()));
  const DeviceSpan param = context.span(args.param);
  bool launch = false;
  with_scalar_type(args.param.dtype(), [&]<typename T>(T) {
    const auto lr = static_cast<T>(args.options.learning_rate);
    const auto beta1 = static_cast<T>(args.options.beta1);
    const auto beta2 = static_cast<T>(args.options.beta2);
    const auto epsilon = static_cast<T>(args.options.epsilon);
    check_beta("beta1", beta1);
    check_beta("beta2", beta2);
    if (!(epsilon >= T{0})) {
      TP_THROW(InvalidArgument, kComponent, "adam_update: epsilon = ", epsilon, " must be >= 0");
    }
    if (n == 0) return;
    const auto t = static_cast<double>(args.step);
    const double correction =
        std::sqrt(1.0 - std::pow(static_cast<double>(beta2), t)) / (1.0 - std::pow(static_cast<double>(beta1), t));
    const auto alpha = static_cast<T>(static_cast<double>(lr) * correction);
    KernelArguments(kernel)
        .span(args.apply.defined() ? context.span(args.apply) : param)  // unused without a flag
        .value(static_cast<cl_uint>(args.apply.defined() ? 1 : 0))
        .span(param)
        .span(context.span(args.grad))
        .span(context.span(args.m))
        .span(context.span(args.v))
        .value(alpha)
        .value(static_cast<T>(T{1} - beta1))
        .value(static_cast<T>(T{1} - beta2))
        .value(epsilon)
        .value(n);
    launch = true;
  });
  if (launch) launch_items(context, kernel, n);
}

}  // namespace

void sgd(device::Stream& stream, const SgdArgs& args) {
  enqueue(stream, [args](LaunchContext& context) { launch_sgd(context, args); });
}

void adam(device::Stream& stream, const AdamArgs& args) {
  enqueue(stream, [args](LaunchContext& context) { launch_adam(context, args); });
}

// OpenCL 1.2 kernels take no array of buffers, so the list is one stream task that enqueues the single update's
// kernel once per entry, back to back: one launch entry, the single updates' bits.
void sgd_multi(device::Stream& stream, const SgdMultiArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    for (std::size_t index = 0; index < args.params.size(); ++index) {
      launch_sgd(context, SgdArgs{.apply = {},
                                  .param = args.params[index],
                                  .grad = args.grads[index],
                                  .velocity = args.velocities.empty() ? Tensor{} : args.velocities[index],
                                  .options = args.options});
    }
  });
}

void adam_multi(device::Stream& stream, const AdamMultiArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    for (std::size_t index = 0; index < args.params.size(); ++index) {
      launch_adam(context, AdamArgs{.apply = {},
                                    .param = args.params[index],
                                    .grad = args.grads[index],
                                    .m = args.m[index],
                                    .v = args.v[index],
                                    .step = args.step,
                                    .options = args.options});
    }
  });
}

}  // namespace tp::backend::opencl::kernels

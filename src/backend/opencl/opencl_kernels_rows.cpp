// SPDX-License-Identifier: Apache-2.0
// Row and axis launchers on kernels/rows.cl: softmax, sparse cross-entropy, the correct count and the
// reductions over the middle axis. Semantics: backend/cpu/kernels/softmax.hpp, cross_entropy.hpp,
// metrics.hpp and reduce.hpp.
#include <algorithm>

#include "backend/opencl/opencl_kernel_support.hpp"
#include "backend/opencl/opencl_kernels.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::opencl::kernels {

namespace {

constexpr std::string_view kProgram = "rows";

// A batch with no classes has no valid label at all: refused before anything runs, as the CPU kernels do.
void check_classes(std::string_view op, std::int64_t rows, std::int64_t cols) {
  if (rows > 0 && cols == 0) {
    TP_THROW(InvalidArgument, kComponent, op, ": ", rows, " rows of 0 classes have no valid label");
  }
}

// Runs check_labels and waits for it: a label outside [0, cols) throws tp::InvalidArgument naming the first bad
// row, its label and the class count (the stream's error, as the CPU kernels' check), before the kernels that
// use the labels are enqueued.
void check_labels(LaunchContext& context, std::string_view op, const Tensor& labels, std::int64_t rows,
                  std::int64_t cols) {
  if (rows == 0) return;
  // The stream's own status word, not a tensor: the check allocates nothing from the memory stack.
  const DeviceSpan first_bad = context.status_word();
  const cl_uint none = 0xFFFF'FFFFU;
  fill_bytes(context, first_bad, &none, sizeof(none), sizeof(none));
  cl_kernel kernel = context.kernel(kProgram, "check_labels");
  const DeviceSpan label_span = context.span(labels);
  const bool wide = labels.dtype() == DType::i64;
  KernelArguments(kernel)
      .span(label_span)
      .value(static_cast<cl_uint>(wide ? 1 : 0))
      .value(static_cast<cl_ulong>(rows))
      .value(static_cast<cl_ulong>(cols))
      .span(first_bad);
  launch_items(context, kernel, static_cast<std::uint64_t>(rows));
  cl_uint row = none;
  check(clEnqueueReadBuffer(context.queue(), first_bad.buffer, CL_TRUE, first_bad.offset, sizeof(row), &row, 0, nullptr,
                            nullptr),
        "clEnqueueReadBuffer (label check)");
  if (row == none) return;
  std::int64_t label = 0;
  if (wide) {
    check(clEnqueueReadBuffer(context.queue(), label_span.buffer, CL_TRUE, label_span.offset + row * sizeof(cl_long),
                              sizeof(cl_long), &label, 0, nullptr, nullptr),
          "clEnqueueReadBuffer (bad label)");
  } else {
    cl_int narrow = 0;
    check(clEnqueueReadBuffer(context.queue(), label_span.buffer, CL_TRUE, label_span.offset + row * sizeof(cl_int),
                              sizeof(cl_int), &narrow, 0, nullptr, nullptr),
          "clEnqueueReadBuffer (bad label)");
    label = narrow;
  }
  TP_THROW(InvalidArgument, kComponent, op, ": row ", row, " has label ", label, ", outside the valid class range [0, ",
           cols, ") for ", cols, " classes");
}

// Max and argmax have no identity over an empty axis (reduce.hpp).
void check_axis(std::string_view op, const AxisExtent& extent) {
  if (extent.axis == 0) {
    TP_THROW(InvalidArgument, kComponent, op, ": cannot reduce an empty axis (axis length 0); there is no identity");
  }
}

}  // namespace

// cpu::softmax, log_softmax: one work-item per row.
void softmax(device::Stream& stream, const SoftmaxArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "softmax", args.x.dtype());
    const auto rows = static_cast<cl_ulong>(args.x.shape().dim(0));
    const auto cols = static_cast<cl_ulong>(args.x.shape().dim(1));
    if (rows == 0 || cols == 0) return;
    cl_kernel kernel = context.kernel(kProgram, kernel_name("softmax", args.x.dtype()));
    KernelArguments(kernel)
        .span(context.span(args.x))
        .span(context.span(args.out))
        .value(rows)
        .value(cols)
        .value(static_cast<cl_uint>(args.log ? 1 : 0));
    launch_items(context, kernel, rows);
  });
}

// cpu::sparse_softmax_cross_entropy, sparse_categorical_cross_entropy_from_probs: one work-item per row.
void cross_entropy(device::Stream& stream, const CrossEntropyArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "cross_entropy", args.input.dtype());
    const std::int64_t rows = args.input.shape().dim(0);
    const std::int64_t cols = args.input.shape().dim(1);
    check_classes("cross_entropy", rows, cols);
    check_labels(context, "cross_entropy", args.labels, rows, cols);
    if (rows == 0) return;
    const char* base =
        args.kind == ops::CrossEntropyInput::logits ? "cross_entropy_logits" : "cross_entropy_probabilities";
    cl_kernel kernel = context.kernel(kProgram, kernel_name(base, args.input.dtype()));
    const bool has_gradient = args.gradient.defined();
    const DeviceSpan loss = context.span(args.loss);
    KernelArguments(kernel)
        .span(context.span(args.input))
        .span(context.span(args.labels))
        .value(static_cast<cl_uint>(args.labels.dtype() == DType::i64 ? 1 : 0))
        .span(loss)
        .span(has_gradient ? context.span(args.gradient) : loss)  // unused without a gradient
        .value(static_cast<cl_uint>(has_gradient ? 1 : 0))
        .value(static_cast<cl_ulong>(rows))
        .value(static_cast<cl_ulong>(cols));
    launch_items(context, kernel, static_cast<std::uint64_t>(rows));
  });
}

// cpu::correct_count, stored as float32: one work-group counts every row (a partial count per work-item,
// added in order by the first).
void correct_count(device::Stream& stream, const CorrectCountArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "correct_count", args.predictions.dtype());
    const std::int64_t rows = args.predictions.shape().dim(0);
    const std::int64_t cols = args.predictions.shape().dim(1);
    check_classes("correct_count", rows, cols);
    check_labels(context, "correct_count", args.labels, rows, cols);
    cl_kernel kernel = context.kernel(kProgram, kernel_name("correct_count", args.predictions.dtype()));
    const std::size_t group = work_group_size(context, kernel);
    KernelArguments(kernel)
        .span(context.span(args.predictions))
        .span(context.span(args.labels))
        .value(static_cast<cl_uint>(args.labels.dtype() == DType::i64 ? 1 : 0))
        .span(context.span(args.out))
        .value(static_cast<cl_ulong>(rows))
        .value(static_cast<cl_ulong>(cols))
        .local(group * sizeof(cl_uint));
    launch_groups(context, kernel, group, 1);
  });
}

// cpu::reduce_sum, reduce_mean, reduce_max: one work-item per output element.
void reduce(device::Stream& stream, const ReduceArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "reduce", args.x.dtype());
    if (args.reduction == ops::Reduction::max) check_axis("reduce_max", args.extent);
    const auto n = static_cast<cl_ulong>(args.extent.outer * args.extent.inner);
    if (n == 0) return;
    const cl_uint code = args.reduction == ops::Reduction::sum ? 0 : args.reduction == ops::Reduction::mean ? 1 : 2;
    cl_kernel kernel = context.kernel(kProgram, kernel_name("reduce", args.x.dtype()));
    KernelArguments(kernel)
        .span(context.span(args.x))
        .span(context.span(args.out))
        .value(static_cast<cl_ulong>(args.extent.axis))
        .value(static_cast<cl_ulong>(args.extent.inner))
        .value(code)
        .value(n);
    launch_items(context, kernel, n);
  });
}

// cpu::argmax: one work-item per output element, the first maximum (or the first NaN).
void argmax(device::Stream& stream, const ArgMaxArgs& args) {
  enqueue(stream, [args](LaunchContext& context) {
    require_fp64(context, "argmax", args.x.dtype());
    check_axis("argmax", args.extent);
    const auto n = static_cast<cl_ulong>(args.extent.outer * args.extent.inner);
    if (n == 0) return;
    cl_kernel kernel = context.kernel(kProgram, kernel_name("argmax", args.x.dtype()));
    KernelArguments(kernel)
        .span(context.span(args.x))
        .span(context.span(args.out))
        .value(static_cast<cl_ulong>(args.extent.axis))
        .value(static_cast<cl_ulong>(args.extent.inner))
        .value(n);
    launch_items(context, kernel, n);
  });
}

}  // namespace tp::backend::opencl::kernels

// SPDX-License-Identifier: Apache-2.0
// Row and axis adapters on kernels/rows.cu: softmax, sparse cross-entropy, the correct count and the reductions
// over the middle axis. Semantics: backend/cpu/kernels/softmax.hpp, cross_entropy.hpp, metrics.hpp, reduce.hpp.
// A label outside [0, classes) is found on the device (support::check_labels, in the same command, checked by
// the stream's completer: the worker does not wait for the device) and becomes the stream's
// tp::InvalidArgument, as the CPU kernels' refusal.
#include "backend/cuda/cuda_kernel_support.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda::adapters {

using support::address;
using support::check_launch;
using support::enqueue;
using support::kernel_dtype;

namespace {

// A batch with no classes has no valid label at all: refused before anything runs, as the CPU kernels do.
void check_classes(std::string_view op, std::int64_t rows, std::int64_t cols) {
  if (rows > 0 && cols == 0) {
    TP_THROW(InvalidArgument, support::kComponent, op, ": ", rows, " rows of 0 classes have no valid label");
  }
}

// Max and argmax have no identity over an empty axis (reduce.hpp).
void check_axis(std::string_view op, const AxisExtent& extent) {
  if (extent.axis == 0) {
    TP_THROW(InvalidArgument, support::kComponent, op,
             ": cannot reduce an empty axis (axis length 0); there is no identity");
  }
}

}  // namespace

// cpu::softmax, log_softmax: one thread per row.
void softmax(device::Stream& stream, const SoftmaxArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    check_launch(kernels::launch_softmax(kernel_dtype(args.x.dtype()), address(args.x), address(args.out),
                                         args.x.shape().dim(0), args.x.shape().dim(1), args.log, native),
                 "launch_softmax");
  });
}

// cpu::sparse_softmax_cross_entropy, sparse_categorical_cross_entropy_from_probs: one thread per row.
void cross_entropy(device::Stream& stream, const CrossEntropyArgs& args) {
  const std::int64_t rows = args.input.shape().dim(0);
  const std::int64_t cols = args.input.shape().dim(1);
  check_classes("cross_entropy", rows, cols);
  CudaStream& cuda = cuda_stream(stream);
  enqueue(stream, [args, rows, cols, &cuda](cudaStream_t native) {
    support::check_labels(cuda, native, "cross_entropy", args.labels, rows, cols);
    check_launch(
        kernels::launch_cross_entropy(kernel_dtype(args.input.dtype()), args.kind == ops::CrossEntropyInput::logits,
                                      address(args.input), address(args.labels), args.labels.dtype() == DType::i64,
                                      address(args.loss), address(args.gradient), rows, cols, native),
        "launch_cross_entropy");
  });
}

// cpu::correct_count, stored as float32: one block counts every row.
void correct_count(device::Stream& stream, const CorrectCountArgs& args) {
  const std::int64_t rows = args.predictions.shape().dim(0);
  const std::int64_t cols = args.predictions.shape().dim(1);
  check_classes("correct_count", rows, cols);
  CudaStream& cuda = cuda_stream(stream);
  enqueue(stream, [args, rows, cols, &cuda](cudaStream_t native) {
    support::check_labels(cuda, native, "correct_count", args.labels, rows, cols);
    check_launch(kernels::launch_correct_count(kernel_dtype(args.predictions.dtype()), address(args.predictions),
                                               address(args.labels), args.labels.dtype() == DType::i64,
                                               static_cast<float*>(args.out.data()), rows, cols, native),
                 "launch_correct_count");
  });
}

// cpu::reduce_sum, reduce_mean, reduce_max: one thread per output element.
void reduce(device::Stream& stream, const ReduceArgs& args) {
  if (args.reduction == ops::Reduction::max) check_axis("reduce_max", args.extent);
  const int code = args.reduction == ops::Reduction::sum ? 0 : args.reduction == ops::Reduction::mean ? 1 : 2;
  enqueue(stream, [args, code](cudaStream_t native) {
    check_launch(
        kernels::launch_reduce(kernel_dtype(args.x.dtype()), code, address(args.x), address(args.out), args.extent.axis,
                               args.extent.inner, args.extent.outer * args.extent.inner, native),
        "launch_reduce");
  });
}

// cpu::argmax: one thread per output element, the first maximum (or the first NaN).
void argmax(device::Stream& stream, const ArgMaxArgs& args) {
  check_axis("argmax", args.extent);
  enqueue(stream, [args](cudaStream_t native) {
    check_launch(kernels::launch_argmax(kernel_dtype(args.x.dtype()), address(args.x),
                                        static_cast<std::int64_t*>(address(args.out)), args.extent.axis,
                                        args.extent.inner, args.extent.outer * args.extent.inner, native),
                 "launch_argmax");
  });
}

}  // namespace tp::backend::cuda::adapters

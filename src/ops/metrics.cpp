// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/metrics.hpp"

#include "ops/op_support.hpp"

namespace tp::ops {

namespace {

constexpr std::string_view kCorrectCount = "CorrectCount";

void check_correct_count(const Tensor& predictions, const Tensor& labels) {
  detail::require_rank(kCorrectCount, {"predictions", predictions}, 2);
  detail::require_floating(kCorrectCount, {"predictions", predictions});
  if (labels.dtype() != DType::i32 && labels.dtype() != DType::i64) {
    TP_THROW(InvalidArgument, "ops", kCorrectCount, ": labels are ", name_of(labels.dtype()), labels.shape(),
             "; they must be int32 or int64 class indexes (cast first)");
  }
  detail::require_shape(kCorrectCount, {"labels", labels}, Shape{predictions.shape().dim(0)});
}

}  // namespace

void correct_count_into(const Tensor& predictions, const Tensor& labels, const Tensor& out, const OpContext& context) {
  device::Device& device =
      detail::common_device(kCorrectCount, {{"predictions", predictions}, {"labels", labels}, {"out", out}});
  check_correct_count(predictions, labels);
  if (out.dtype() != DType::f32) {
    TP_THROW(InvalidArgument, "ops", kCorrectCount, ": out is ", name_of(out.dtype()), out.shape(),
             "; it must be float32");
  }
  detail::require_shape(kCorrectCount, {"out", out}, Shape{});
  device::Stream& stream = detail::stream_for(kCorrectCount, device, context);
  detail::kernel(device, &kernels::KernelTable::correct_count, kCorrectCount)(
      stream, kernels::CorrectCountArgs{.predictions = predictions, .labels = labels, .out = out});
}

Tensor correct_count(const Tensor& predictions, const Tensor& labels, const OpContext& context) {
  device::Device& device = detail::common_device(kCorrectCount, {{"predictions", predictions}, {"labels", labels}});
  check_correct_count(predictions, labels);
  Tensor out = detail::allocate_output(kCorrectCount, Shape{}, DType::f32, device, context);
  correct_count_into(predictions, labels, out, context);
  return out;
}

}  // namespace tp::ops

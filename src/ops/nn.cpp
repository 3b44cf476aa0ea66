// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/nn.hpp"

#include "ops/op_support.hpp"

namespace tp::ops {

namespace {

std::int64_t rows_of(const Tensor& x) { return x.shape().dim(0); }
std::int64_t cols_of(const Tensor& x) { return x.shape().dim(1); }

void check_bias_add(const Tensor& x, const Tensor& bias) {
  detail::require_rank("BiasAdd", {"x", x}, 2);
  detail::require_floating_or_half("BiasAdd", {"x", x});
  detail::require_same_dtype("BiasAdd", {"x", x}, {"bias", bias});
  detail::require_shape("BiasAdd", {"bias", bias}, Shape{cols_of(x)});
}

}  // namespace

void bias_add_into(const Tensor& x, const Tensor& bias, const Tensor& out, const OpContext& context) {
  device::Device& device = detail::common_device("BiasAdd", {{"x", x}, {"bias", bias}, {"out", out}});
  check_bias_add(x, bias);
  detail::require_same_dtype("BiasAdd", {"x", x}, {"out", out});
  detail::require_shape("BiasAdd", {"out", out}, x.shape());
  device::Stream& stream = detail::stream_for("BiasAdd", device, context);
  detail::kernel(device, &kernels::KernelTable::bias_add, "BiasAdd")(
      stream, kernels::BiasAddArgs{.x = x, .bias = bias, .out = out});
}

Tensor bias_add(const Tensor& x, const Tensor& bias, const OpContext& context) {
  device::Device& device = detail::common_device("BiasAdd", {{"x", x}, {"bias", bias}});
  check_bias_add(x, bias);
  Tensor out = detail::allocate_output("BiasAdd", x.shape(), x.dtype(), device, context);
  bias_add_into(x, bias, out, context);
  return out;
}

void bias_add_grad_into(const Tensor& dy, const Tensor& dbias, const OpContext& context) {
  device::Device& device = detail::common_device("BiasAddGrad", {{"dy", dy}, {"dbias", dbias}});
  detail::require_rank("BiasAddGrad", {"dy", dy}, 2);
  detail::require_floating_or_half("BiasAddGrad", {"dy", dy});
  detail::require_same_dtype("BiasAddGrad", {"dy", dy}, {"dbias", dbias});
  detail::require_shape("BiasAddGrad", {"dbias", dbias}, Shape{cols_of(dy)});
  device::Stream& stream = detail::stream_for("BiasAddGrad", device, context);
  detail::kernel(device, &kernels::KernelTable::bias_add_grad, "BiasAddGrad")(
      stream, kernels::BiasAddGradArgs{.dy = dy, .dbias = dbias});
}

Tensor bias_add_grad(const Tensor& dy, const OpContext& context) {
  device::Device& device = detail::common_device("BiasAddGrad", {{"dy", dy}});
  detail::require_rank("BiasAddGrad", {"dy", dy}, 2);
  Tensor dbias = detail::allocate_output("BiasAddGrad", Shape{cols_of(dy)}, dy.dtype(), device, context);
  bias_add_grad_into(dy, dbias, context);
  return dbias;
}

void relu_into(const Tensor& x, const Tensor& out, const OpContext& context) {
  device::Device& device = detail::common_device("Relu", {{"x", x}, {"out", out}});
  detail::require_floating_or_half("Relu", {"x", x});
  detail::require_same_dtype("Relu", {"x", x}, {"out", out});
  detail::require_shape("Relu", {"out", out}, x.shape());
  device::Stream& stream = detail::stream_for("Relu", device, context);
  detail::kernel(device, &kernels::KernelTable::relu, "Relu")(stream, kernels::ReluArgs{.x = x, .out = out});
}

Tensor relu(const Tensor& x, const OpContext& context) {
  device::Device& device = detail::common_device("Relu", {{"x", x}});
  detail::require_floating_or_half("Relu", {"x", x});
  Tensor out = detail::allocate_output("Relu", x.shape(), x.dtype(), device, context);
  relu_into(x, out, context);
  return out;
}

void relu_grad_into(const Tensor& dy, const Tensor& x, const Tensor& dx, const OpContext& context) {
  device::Device& device = detail::common_device("ReluGrad", {{"dy", dy}, {"x", x}, {"dx", dx}});
  detail::require_floating_or_half("ReluGrad", {"x", x});
  detail::require_same_dtype("ReluGrad", {"x", x}, {"dy", dy});
  detail::require_same_dtype("ReluGrad", {"x", x}, {"dx", dx});
  detail::require_shape("ReluGrad", {"dy", dy}, x.shape());
  detail::require_shape("ReluGrad", {"dx", dx}, x.shape());
  device::Stream& stream = detail::stream_for("ReluGrad", device, context);
  detail::kernel(device, &kernels::KernelTable::relu_grad, "ReluGrad")(
      stream, kernels::ReluGradArgs{.dy = dy, .x = x, .dx = dx});
}

Tensor relu_grad(const Tensor& dy, const Tensor& x, const OpContext& context) {
  device::Device& device = detail::common_device("ReluGrad", {{"dy", dy}, {"x", x}});
  detail::require_floating_or_half("ReluGrad", {"x", x});
  Tensor dx = detail::allocate_output("ReluGrad", x.shape(), x.dtype(), device, context);
  relu_grad_into(dy, x, dx, context);
  return dx;
}

namespace {

void softmax_family_into(std::string_view op, bool log, const Tensor& x, const Tensor& out, const OpContext& context) {
  device::Device& device = detail::common_device(op, {{"x", x}, {"out", out}});
  detail::require_rank(op, {"x", x}, 2);
  detail::require_floating(op, {"x", x});
  detail::require_same_dtype(op, {"x", x}, {"out", out});
  detail::require_shape(op, {"out", out}, x.shape());
  device::Stream& stream = detail::stream_for(op, device, context);
  detail::kernel(device, &kernels::KernelTable::softmax, op)(stream,
                                                             kernels::SoftmaxArgs{.x = x, .out = out, .log = log});
}

Tensor softmax_family(std::string_view op, bool log, const Tensor& x, const OpContext& context) {
  device::Device& device = detail::common_device(op, {{"x", x}});
  detail::require_floating(op, {"x", x});
  Tensor out = detail::allocate_output(op, x.shape(), x.dtype(), device, context);
  softmax_family_into(op, log, x, out, context);
  return out;
}

}  // namespace

void softmax_into(const Tensor& x, const Tensor& out, const OpContext& context) {
  softmax_family_into("Softmax", false, x, out, context);
}
Tensor softmax(const Tensor& x, const OpContext& context) { return softmax_family("Softmax", false, x, context); }
void log_softmax_into(const Tensor& x, const Tensor& out, const OpContext& context) {
  softmax_family_into("LogSoftmax", true, x, out, context);
}
Tensor log_softmax(const Tensor& x, const OpContext& context) { return softmax_family("LogSoftmax", true, x, context); }

namespace {

constexpr std::string_view kCrossEntropy = "SparseCrossEntropy";

void check_cross_entropy(const Tensor& input, const Tensor& labels) {
  detail::require_rank(kCrossEntropy, {"input", input}, 2);
  detail::require_floating(kCrossEntropy, {"input", input});
  if (labels.dtype() != DType::i32 && labels.dtype() != DType::i64) {
    TP_THROW(InvalidArgument, "ops", kCrossEntropy, ": labels are ", name_of(labels.dtype()), labels.shape(),
             "; they must be int32 or int64 class indexes (cast first)");
  }
  detail::require_shape(kCrossEntropy, {"labels", labels}, Shape{rows_of(input)});
}

}  // namespace

void sparse_cross_entropy_into(const Tensor& input, const Tensor& labels, const Tensor& loss, const Tensor& gradient,
                               CrossEntropyInput kind, const OpContext& context) {
  device::Device& device = detail::common_device(
      kCrossEntropy, {{"input", input}, {"labels", labels}, {"loss", loss}, {"gradient", gradient}});
  check_cross_entropy(input, labels);
  detail::require_same_dtype(kCrossEntropy, {"input", input}, {"loss", loss});
  detail::require_same_dtype(kCrossEntropy, {"input", input}, {"gradient", gradient});
  detail::require_shape(kCrossEntropy, {"loss", loss}, Shape{rows_of(input)});
  detail::require_shape(kCrossEntropy, {"gradient", gradient}, input.shape());
  device::Stream& stream = detail::stream_for(kCrossEntropy, device, context);
  detail::kernel(device, &kernels::KernelTable::cross_entropy, kCrossEntropy)(
      stream,
      kernels::CrossEntropyArgs{.kind = kind, .input = input, .labels = labels, .loss = loss, .gradient = gradient});
}

CrossEntropy sparse_cross_entropy(const Tensor& input, const Tensor& labels, CrossEntropyInput kind,
                                  const OpContext& context) {
  device::Device& device = detail::common_device(kCrossEntropy, {{"input", input}, {"labels", labels}});
  check_cross_entropy(input, labels);
  CrossEntropy result{detail::allocate_output(kCrossEntropy, Shape{rows_of(input)}, input.dtype(), device, context),
                      detail::allocate_output(kCrossEntropy, input.shape(), input.dtype(), device, context)};
  sparse_cross_entropy_into(input, labels, result.loss, result.gradient, kind, context);
  return result;
}

}  // namespace tp::ops

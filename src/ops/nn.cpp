#include "tensorpool/ops/nn.hpp"

#include "backend/cpu/kernels/activations.hpp"
#include "backend/cpu/kernels/bias.hpp"
#include "backend/cpu/kernels/cross_entropy.hpp"
#include "backend/cpu/kernels/half_nn.hpp"
#include "backend/cpu/kernels/softmax.hpp"
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
  if (detail::is_half(x.dtype())) {
    detail::dispatch_half(x.dtype(), [&]<typename H>(H) {
      stream.enqueue([x, bias, out] {
        backend::cpu::bias_add_half<H>(x.data<H>(), bias.data<H>(), out.data<H>(), rows_of(x), cols_of(x));
      });
    });
    return;
  }
  detail::dispatch_floating(x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x, bias, out] {
      backend::cpu::bias_add<T>(x.data<T>(), bias.data<T>(), out.data<T>(), rows_of(x), cols_of(x));
    });
  });
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
  if (detail::is_half(dy.dtype())) {
    detail::dispatch_half(dy.dtype(), [&]<typename H>(H) {
      stream.enqueue([dy, dbias] {
        backend::cpu::bias_add_grad_half<H>(dy.data<H>(), dbias.data<H>(), rows_of(dy), cols_of(dy));
      });
    });
    return;
  }
  detail::dispatch_floating(dy.dtype(), [&]<typename T>(T) {
    stream.enqueue(
        [dy, dbias] { backend::cpu::bias_add_grad<T>(dy.data<T>(), dbias.data<T>(), rows_of(dy), cols_of(dy)); });
  });
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
  if (detail::is_half(x.dtype())) {
    detail::dispatch_half(x.dtype(), [&]<typename H>(H) {
      stream.enqueue([x, out] { backend::cpu::relu_half<H>(x.data<H>(), out.data<H>(), x.num_elements()); });
    });
    return;
  }
  detail::dispatch_floating(x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x, out] { backend::cpu::relu<T>(x.data<T>(), out.data<T>(), x.num_elements()); });
  });
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
  if (detail::is_half(x.dtype())) {
    detail::dispatch_half(x.dtype(), [&]<typename H>(H) {
      stream.enqueue(
          [dy, x, dx] { backend::cpu::relu_grad_half<H>(dy.data<H>(), x.data<H>(), dx.data<H>(), x.num_elements()); });
    });
    return;
  }
  detail::dispatch_floating(x.dtype(), [&]<typename T>(T) {
    stream.enqueue(
        [dy, x, dx] { backend::cpu::relu_grad<T>(dy.data<T>(), x.data<T>(), dx.data<T>(), x.num_elements()); });
  });
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
  detail::dispatch_floating(x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x, out, log] {
      if (log) {
        backend::cpu::log_softmax<T>(x.data<T>(), out.data<T>(), rows_of(x), cols_of(x));
      } else {
        backend::cpu::softmax<T>(x.data<T>(), out.data<T>(), rows_of(x), cols_of(x));
      }
    });
  });
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

template <typename T, typename Label>
void cross_entropy_kernel(CrossEntropyInput kind, const Tensor& input, const Tensor& labels, const Tensor& loss,
                          const Tensor& gradient) {
  if (kind == CrossEntropyInput::logits) {
    backend::cpu::sparse_softmax_cross_entropy<T, Label>(input.data<T>(), labels.data<Label>(), loss.data<T>(),
                                                         gradient.data<T>(), rows_of(input), cols_of(input));
  } else {
    backend::cpu::sparse_categorical_cross_entropy_from_probs<T, Label>(
        input.data<T>(), labels.data<Label>(), loss.data<T>(), gradient.data<T>(), rows_of(input), cols_of(input));
  }
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
  detail::dispatch_floating(input.dtype(), [&]<typename T>(T) {
    stream.enqueue([kind, input, labels, loss, gradient] {
      if (labels.dtype() == DType::i32) {
        cross_entropy_kernel<T, std::int32_t>(kind, input, labels, loss, gradient);
      } else {
        cross_entropy_kernel<T, std::int64_t>(kind, input, labels, loss, gradient);
      }
    });
  });
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

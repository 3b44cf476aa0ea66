// SPDX-License-Identifier: Apache-2.0
// BiasAdd(Grad), Relu(Grad), (Log)Softmax and sparse cross-entropy on the kernels of backend/cpu/kernels/
// (float32, float64; the MLP path's BiasAdd(Grad) and Relu(Grad) also float16 / bfloat16 through half_nn.hpp).
#include "backend/cpu/kernels/activations.hpp"
#include "backend/cpu/kernels/bias.hpp"
#include "backend/cpu/kernels/cross_entropy.hpp"
#include "backend/cpu/kernels/half_nn.hpp"
#include "backend/cpu/kernels/softmax.hpp"
#include "backend/cpu/ops/dispatch.hpp"
#include "backend/cpu/ops/op_kernels.hpp"

namespace tp::backend::cpu::op_kernels {

namespace {

std::int64_t rows_of(const Tensor& x) { return x.shape().dim(0); }
std::int64_t cols_of(const Tensor& x) { return x.shape().dim(1); }

template <typename T, typename Label>
void cross_entropy_kernel(ops::CrossEntropyInput kind, const Tensor& input, const Tensor& labels, const Tensor& loss,
                          const Tensor& gradient) {
  if (kind == ops::CrossEntropyInput::logits) {
    sparse_softmax_cross_entropy<T, Label>(input.data<T>(), labels.data<Label>(), loss.data<T>(), gradient.data<T>(),
                                           rows_of(input), cols_of(input));
  } else {
    sparse_categorical_cross_entropy_from_probs<T, Label>(input.data<T>(), labels.data<Label>(), loss.data<T>(),
                                                          gradient.data<T>(), rows_of(input), cols_of(input));
  }
}

}  // namespace

void bias_add(device::Stream& stream, const ops::kernels::BiasAddArgs& args) {
  if (is_half(args.x.dtype())) {
    dispatch_half(args.x.dtype(), [&]<typename H>(H) {
      stream.enqueue([x = args.x, bias = args.bias, out = args.out] {
        bias_add_half<H>(x.data<H>(), bias.data<H>(), out.data<H>(), rows_of(x), cols_of(x));
      });
    });
    return;
  }
  dispatch_floating(args.x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x = args.x, bias = args.bias, out = args.out] {
      cpu::bias_add<T>(x.data<T>(), bias.data<T>(), out.data<T>(), rows_of(x), cols_of(x));
    });
  });
}

void bias_add_grad(device::Stream& stream, const ops::kernels::BiasAddGradArgs& args) {
  if (is_half(args.dy.dtype())) {
    dispatch_half(args.dy.dtype(), [&]<typename H>(H) {
      stream.enqueue([dy = args.dy, dbias = args.dbias] {
        bias_add_grad_half<H>(dy.data<H>(), dbias.data<H>(), rows_of(dy), cols_of(dy));
      });
    });
    return;
  }
  dispatch_floating(args.dy.dtype(), [&]<typename T>(T) {
    stream.enqueue([dy = args.dy, dbias = args.dbias] {
      cpu::bias_add_grad<T>(dy.data<T>(), dbias.data<T>(), rows_of(dy), cols_of(dy));
    });
  });
}

void relu(device::Stream& stream, const ops::kernels::ReluArgs& args) {
  if (is_half(args.x.dtype())) {
    dispatch_half(args.x.dtype(), [&]<typename H>(H) {
      stream.enqueue([x = args.x, out = args.out] { relu_half<H>(x.data<H>(), out.data<H>(), x.num_elements()); });
    });
    return;
  }
  dispatch_floating(args.x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x = args.x, out = args.out] { cpu::relu<T>(x.data<T>(), out.data<T>(), x.num_elements()); });
  });
}

void relu_grad(device::Stream& stream, const ops::kernels::ReluGradArgs& args) {
  if (is_half(args.x.dtype())) {
    dispatch_half(args.x.dtype(), [&]<typename H>(H) {
      stream.enqueue([dy = args.dy, x = args.x, dx = args.dx] {
        relu_grad_half<H>(dy.data<H>(), x.data<H>(), dx.data<H>(), x.num_elements());
      });
    });
    return;
  }
  dispatch_floating(args.x.dtype(), [&]<typename T>(T) {
    stream.enqueue([dy = args.dy, x = args.x, dx = args.dx] {
      cpu::relu_grad<T>(dy.data<T>(), x.data<T>(), dx.data<T>(), x.num_elements());
    });
  });
}

void softmax(device::Stream& stream, const ops::kernels::SoftmaxArgs& args) {
  dispatch_floating(args.x.dtype(), [&]<typename T>(T) {
    stream.enqueue([x = args.x, out = args.out, log = args.log] {
      if (log) {
        log_softmax<T>(x.data<T>(), out.data<T>(), rows_of(x), cols_of(x));
      } else {
        cpu::softmax<T>(x.data<T>(), out.data<T>(), rows_of(x), cols_of(x));
      }
    });
  });
}

void cross_entropy(device::Stream& stream, const ops::kernels::CrossEntropyArgs& args) {
  dispatch_floating(args.input.dtype(), [&]<typename T>(T) {
    stream.enqueue(
        [kind = args.kind, input = args.input, labels = args.labels, loss = args.loss, gradient = args.gradient] {
          if (labels.dtype() == DType::i32) {
            cross_entropy_kernel<T, std::int32_t>(kind, input, labels, loss, gradient);
          } else {
            cross_entropy_kernel<T, std::int64_t>(kind, input, labels, loss, gradient);
          }
        });
  });
}

}  // namespace tp::backend::cpu::op_kernels

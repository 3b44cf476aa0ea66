// SPDX-License-Identifier: Apache-2.0
// SGD, Adam, Adam across peers and the multi-tensor SGD and Adam on kernels/optimizer.cu, and the seeded
// initialisers on kernels/random.cu.
// Hyperparameters are rounded to the parameter dtype and Adam's step size computed in double exactly as
// backend/cpu/kernels/optimizer.cpp computes them; the apply flag stays on the device (read when the kernel
// runs). Argument checks the CPU kernels make in their task are made in the command, so they become the
// stream's error as on the CPU.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string_view>

#include "backend/cuda/cuda_error.hpp"
#include "backend/cuda/cuda_kernel_support.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda::adapters {

using support::address;
using support::check_launch;
using support::elements;
using support::enqueue;
using support::kernel_dtype;

namespace {

template <typename T>
void check_beta(std::string_view kernel, std::string_view name, T beta) {
  if (!(beta >= T{0} && beta < T{1})) {
    TP_THROW(InvalidArgument, support::kComponent, kernel, ": ", name, " = ", beta, " is outside [0, 1)");
  }
}

// Adam's scalars in T, checked as the CPU's adam_step_size, with alpha = lr sqrt(1 - beta2^t) / (1 - beta1^t)
// computed in double and rounded to T.
template <typename T>
kernels::AdamHyper adam_hyper(std::string_view kernel, const ops::AdamOptions& options, std::int64_t step) {
  if (step < 1) TP_THROW(InvalidArgument, support::kComponent, kernel, ": step = ", step, " must be >= 1");
  const auto lr = static_cast<T>(options.learning_rate);
  const auto beta1 = static_cast<T>(options.beta1);
  const auto beta2 = static_cast<T>(options.beta2);
  const auto epsilon = static_cast<T>(options.epsilon);
  check_beta(kernel, "beta1", beta1);
  check_beta(kernel, "beta2", beta2);
  if (!(epsilon >= T{0})) {
    TP_THROW(InvalidArgument, support::kComponent, kernel, ": epsilon = ", epsilon, " must be >= 0");
  }
  const auto t = static_cast<double>(step);
  const auto alpha = static_cast<T>(static_cast<double>(lr) * std::sqrt(1.0 - std::pow(static_cast<double>(beta2), t)) /
                                    (1.0 - std::pow(static_cast<double>(beta1), t)));
  return kernels::AdamHyper{static_cast<double>(alpha), static_cast<double>(T{1} - beta1),
                            static_cast<double>(T{1} - beta2), static_cast<double>(epsilon)};
}

kernels::AdamHyper adam_hyper_of(DType dtype, std::string_view kernel, const ops::AdamOptions& options,
                                 std::int64_t step) {
  return dtype == DType::f64 ? adam_hyper<double>(kernel, options, step) : adam_hyper<float>(kernel, options, step);
}

// The element indices offset .. offset + n - 1 must fit in 64 bits.
void check_range(std::string_view kernel, std::int64_t n, std::uint64_t offset) {
  if (offset > std::numeric_limits<std::uint64_t>::max() - static_cast<std::uint64_t>(n)) {
    TP_THROW(InvalidArgument, support::kComponent, kernel, ": offset ", offset, " + n ", n,
             " overflows the 64-bit element index");
  }
}

template <typename T>
void check_uniform(T low, T high) {
  const double width = static_cast<double>(high) - static_cast<double>(low);
  if (!std::isfinite(low) || !std::isfinite(high) || !(low <= high) || !std::isfinite(width)) {
    TP_THROW(InvalidArgument, support::kComponent, "uniform: range [low = ", low, ", high = ", high,
             ") must be finite with low <= high and a finite width");
  }
}

template <typename T>
void check_normal(T mean, T stddev) {
  if (!std::isfinite(mean) || !std::isfinite(stddev) || stddev < 0) {
    TP_THROW(InvalidArgument, support::kComponent, "normal: mean = ", mean, ", stddev = ", stddev,
             " must be finite with stddev >= 0");
  }
}

// The random launch's (distribution, a, b, offset) in T, checked as the CPU kernels check them.
template <typename T>
void launch_random_as(const RandomArgs& args, cudaStream_t native) {
  const std::int64_t n = elements(args.out);
  auto a = static_cast<T>(args.a);
  auto b = static_cast<T>(args.b);
  std::uint64_t offset = args.offset;
  int distribution = 0;
  switch (args.distribution) {
    case Distribution::uniform:
      check_range("uniform", n, offset);
      check_uniform(a, b);
      break;
    case Distribution::normal:
      distribution = 1;
      check_range("normal", n, offset);
      check_normal(a, b);
      break;
    case Distribution::glorot_uniform: {
      // Keras's GlorotUniform for a [fan_in, fan_out] kernel: uniform in [-limit, limit), offset 0.
      if (n == 0) return;  // keeps 6 / (0 + 0) out of the limit
      const auto fan_in = static_cast<double>(args.out.shape().dim(0));
      const auto fan_out = static_cast<double>(args.out.shape().dim(1));
      const double limit = std::sqrt(6.0 / (fan_in + fan_out));
      a = static_cast<T>(-limit);
      b = static_cast<T>(limit);
      offset = 0;
      break;
    }
  }
  check_launch(kernels::launch_random(kernel_dtype(args.out.dtype()), distribution, args.out.data(),
                                      static_cast<double>(a), static_cast<double>(b), args.seed, offset, n, native),
               "launch_random");
}

}  // namespace

void sgd(device::Stream& stream, const SgdArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    const bool has_velocity = args.velocity.defined();
    if (!has_velocity && args.options.momentum != 0.0) {
      TP_THROW(InvalidArgument, support::kComponent, "sgd_update: momentum = ", args.options.momentum,
               " needs a velocity buffer, but velocity is undefined");
    }
    const kernels::SgdHyper hyper{args.options.learning_rate, args.options.momentum, args.options.nesterov};
    check_launch(kernels::launch_sgd(kernel_dtype(args.param.dtype()), kernel_dtype(args.grad.dtype()),
                                     static_cast<const float*>(address(args.apply)), address(args.param),
                                     address(args.grad), address(args.velocity), hyper, elements(args.param), native),
                 "launch_sgd");
  });
}

void adam(device::Stream& stream, const AdamArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    const kernels::AdamHyper hyper = adam_hyper_of(args.param.dtype(), "adam_update", args.options, args.step);
    check_launch(
        kernels::launch_adam(kernel_dtype(args.param.dtype()), kernel_dtype(args.grad.dtype()),
                             static_cast<const float*>(address(args.apply)), address(args.param), address(args.grad),
                             address(args.m), address(args.v), hyper, elements(args.param), native),
        "launch_adam");
  });
}

// cpu::adam_update_summed: the gradients read in place (a peer's through unified addressing), summed left to
// right in T inside the update; with more than kPeerSumInputs gradients the sum is formed first in a temporary
// by the peer-sum kernel (the same roundings). The first kAdamMirrors mirrors are written by the update kernel
// element by element, any further ones copied after it. 16-bit gradients (which the op layer lets through
// for a float32 parameter) have no kernel here.
void adam_across_peers(device::Stream& stream, const AdamAcrossPeersArgs& args) {
  if (!args.grads.empty() && args.grads[0].dtype() != args.param.dtype()) {
    TP_THROW(InvalidArgument, support::kComponent, "adam_update_summed: ", name_of(args.grads[0].dtype()),
             " gradients for a ", name_of(args.param.dtype()),
             " parameter have no CUDA kernel; all-reduce them and use AdamUpdate");
  }
  Tensor accumulator;
  if (args.grads.size() > static_cast<std::size_t>(kernels::kPeerSumInputs) && args.param.num_elements() > 0) {
    accumulator = Tensor::empty(args.param.shape(), args.param.dtype(), stream.device(),
                                TensorTag{.name = "adam_across_peers gradient sum",
                                          .kind = memory::AllocationKind::temporary,
                                          .op = "AdamUpdateAcrossPeers"});
  }
  enqueue(stream, [args, accumulator](cudaStream_t native) {
    if (args.grads.empty()) {
      TP_THROW(InvalidArgument, support::kComponent, "adam_update_summed: no gradients to sum (count = 0)");
    }
    const kernels::AdamHyper hyper = adam_hyper_of(args.param.dtype(), "adam_update_summed", args.options, args.step);
    const std::int64_t n = elements(args.param);
    if (n == 0) return;
    const kernels::Dtype dtype = kernel_dtype(args.param.dtype());
    kernels::PeerSumInputs grads{};
    int count = 0;
    if (accumulator.defined()) {
      std::size_t next = 0;
      while (next < args.grads.size()) {
        kernels::PeerSumInputs addends{};
        int addend_count = 0;
        if (next != 0) addends.inputs[addend_count++] = accumulator.data();
        while (addend_count < kernels::kPeerSumInputs && next < args.grads.size()) {
          addends.inputs[addend_count++] = support::peer_address(args.grads[next++]);
        }
        check_launch(kernels::launch_peer_sum(dtype, accumulator.data(), addends, addend_count, n, native),
                     "launch_peer_sum");
      }
      grads.inputs[count++] = accumulator.data();
    } else {
      for (const Tensor& grad : args.grads) grads.inputs[count++] = support::peer_address(grad);
    }
    kernels::AdamMirrorPointers mirrors{};
    const auto fused = static_cast<int>(std::min<std::size_t>(args.mirrors.size(), kernels::kAdamMirrors));
    for (int k = 0; k < fused; ++k) {
      const ops::AdamState& mirror = args.mirrors[static_cast<std::size_t>(k)];
      mirrors.param[k] = support::peer_address(mirror.param);
      mirrors.m[k] = support::peer_address(mirror.m);
      mirrors.v[k] = support::peer_address(mirror.v);
    }
    check_launch(kernels::launch_adam_summed(dtype, address(args.param), grads, count, address(args.m), address(args.v),
                                             mirrors, fused, hyper, n, native),
                 "launch_adam_summed");
    const std::size_t bytes = args.param.nbytes();
    for (std::size_t k = static_cast<std::size_t>(fused); k < args.mirrors.size(); ++k) {
      const ops::AdamState& mirror = args.mirrors[k];
      check(cudaMemcpyAsync(support::peer_address(mirror.param), args.param.data(), bytes, cudaMemcpyDefault, native),
            "cudaMemcpyAsync (adam mirror param)");
      if (!mirror.m.defined()) continue;
      check(cudaMemcpyAsync(support::peer_address(mirror.m), args.m.data(), bytes, cudaMemcpyDefault, native),
            "cudaMemcpyAsync (adam mirror m)");
      check(cudaMemcpyAsync(support::peer_address(mirror.v), args.v.data(), bytes, cudaMemcpyDefault, native),
            "cudaMemcpyAsync (adam mirror v)");
    }
  });
}

// The lists in tables of kMultiTensorEntries entries: one launch per table (one for up to that many variables).
void sgd_multi(device::Stream& stream, const SgdMultiArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    if (args.velocities.empty() && args.options.momentum != 0.0) {
      TP_THROW(InvalidArgument, support::kComponent, "sgd_update_multi: momentum = ", args.options.momentum,
               " needs velocities, but there are none");
    }
    const kernels::SgdHyper hyper{args.options.learning_rate, args.options.momentum, args.options.nesterov};
    kernels::SgdMultiTable table{};
    int count = 0;
    for (std::size_t index = 0; index < args.params.size(); ++index) {
      table.param[count] = address(args.params[index]);
      table.grad[count] = address(args.grads[index]);
      table.velocity[count] = args.velocities.empty() ? nullptr : address(args.velocities[index]);
      table.n[count] = elements(args.params[index]);
      if (++count < kernels::kMultiTensorEntries && index + 1 < args.params.size()) continue;
      check_launch(kernels::launch_sgd_multi(kernel_dtype(args.params[0].dtype()), table, count, hyper, native),
                   "launch_sgd_multi");
      count = 0;
    }
  });
}

void adam_multi(device::Stream& stream, const AdamMultiArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    const kernels::AdamHyper hyper =
        adam_hyper_of(args.params[0].dtype(), "adam_update_multi", args.options, args.step);
    kernels::AdamMultiTable table{};
    int count = 0;
    for (std::size_t index = 0; index < args.params.size(); ++index) {
      table.param[count] = address(args.params[index]);
      table.grad[count] = address(args.grads[index]);
      table.m[count] = address(args.m[index]);
      table.v[count] = address(args.v[index]);
      table.n[count] = elements(args.params[index]);
      if (++count < kernels::kMultiTensorEntries && index + 1 < args.params.size()) continue;
      check_launch(kernels::launch_adam_multi(kernel_dtype(args.params[0].dtype()), table, count, hyper, native),
                   "launch_adam_multi");
      count = 0;
    }
  });
}

void random(device::Stream& stream, const RandomArgs& args) {
  enqueue(stream, [args](cudaStream_t native) {
    if (args.out.dtype() == DType::f64) {
      launch_random_as<double>(args, native);
    } else {
      launch_random_as<float>(args, native);
    }
  });
}

}  // namespace tp::backend::cuda::adapters

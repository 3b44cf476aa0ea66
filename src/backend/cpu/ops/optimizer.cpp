// SPDX-License-Identifier: Apache-2.0
// SgdUpdate and AdamUpdate on backend/cpu/kernels/optimizer.hpp, and on scaled_optimizer.hpp when the update
// is conditional (an apply flag) or the gradient is float16 / bfloat16 for a float32 parameter.
// AdamAcrossPeers on adam_update_summed (adam_update_summed_half for 16-bit gradients, writing the compute copies
// when asked), a peer's gradient read (and a mirror on a peer written) in place under a PeerAccessScope of its device.
// SgdUpdateMulti and AdamUpdateMulti on sgd_update_multi / adam_update_multi: one task for the whole list.
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/kernels/optimizer.hpp"
#include "backend/cpu/kernels/scaled_optimizer.hpp"
#include "backend/cpu/ops/dispatch.hpp"
#include "backend/cpu/ops/op_kernels.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::backend::cpu::op_kernels {

namespace {

// Read on the stream, inside the task: the flag is computed by an earlier kernel of the same step. 0 skips
// the update; any other value multiplies the gradient (1 without a flag).
float gradient_factor(const Tensor& apply) { return apply.defined() ? *apply.data<float>() : 1.0F; }

// Calls update(G{}) with G the C++ type of grad's dtype, among T, Half and BFloat16.
template <typename T, typename Update>
void dispatch_gradient(DType dtype, Update&& update) {
  if (dtype == DType::f16) {
    std::forward<Update>(update)(Half{});
  } else if (dtype == DType::bf16) {
    std::forward<Update>(update)(BFloat16{});
  } else {
    std::forward<Update>(update)(T{});
  }
}

// adam_across_peers with T the parameters' dtype and G the gradients' (T, or Half / BFloat16 for float32
// parameters: adam_update_summed_half).
template <typename T, typename G>
void enqueue_adam_across_peers(device::Stream& stream, const ops::kernels::AdamAcrossPeersArgs& args) {
  stream.enqueue([param = args.param, grads = args.grads, m = args.m, v = args.v, step = args.step,
                  options = args.options, mirrors = args.mirrors, copy = args.copy] {
    // A peer's pointers are taken under its scope; the stream order the op's caller set up keeps them valid.
    std::vector<const G*> sources;
    sources.reserve(grads.size());
    for (const Tensor& grad : grads) {
      const device::PeerAccessScope peer(grad.device());
      sources.push_back(grad.data<G>());
    }
    std::vector<AdamMirror<T>> targets;
    targets.reserve(mirrors.size());
    for (const ops::AdamState& mirror : mirrors) {
      const device::PeerAccessScope peer(mirror.param.device());
      const bool slots = mirror.m.defined();  // else the parameter only
      targets.push_back({.param = mirror.param.data<T>(),
                         .m = slots ? mirror.m.data<T>() : nullptr,
                         .v = slots ? mirror.v.data<T>() : nullptr});
    }
    const auto lr = static_cast<T>(options.learning_rate);
    const auto beta1 = static_cast<T>(options.beta1);
    const auto beta2 = static_cast<T>(options.beta2);
    const auto epsilon = static_cast<T>(options.epsilon);
    if constexpr (std::is_same_v<G, T>) {
      adam_update_summed<T>(param.data<T>(), sources.data(), sources.size(), m.data<T>(), v.data<T>(),
                            param.num_elements(), lr, beta1, beta2, epsilon, step, targets);
    } else {
      // The compute copies (ops validated: all of G, beside their parameters, or none at all).
      std::vector<G*> mirror_copies;
      if (copy.defined()) {
        mirror_copies.reserve(mirrors.size());
        for (const ops::AdamState& mirror : mirrors) {
          const device::PeerAccessScope peer(mirror.copy.device());
          mirror_copies.push_back(mirror.copy.data<G>());
        }
      }
      const HalfCopies<G> copies{.own = copy.defined() ? copy.data<G>() : nullptr, .mirrors = mirror_copies};
      adam_update_summed_half<G>(param.data<float>(), sources.data(), sources.size(), m.data<float>(), v.data<float>(),
                                 param.num_elements(), lr, beta1, beta2, epsilon, step, targets, copies);
    }
  });
}

}  // namespace

void sgd(device::Stream& stream, const ops::kernels::SgdArgs& args) {
  const bool has_velocity = args.velocity.defined();
  dispatch_floating(args.param.dtype(), [&]<typename T>(T) {
    stream.enqueue([apply = args.apply, param = args.param, grad = args.grad, velocity = args.velocity,
                    options = args.options, has_velocity] {
      const float factor = gradient_factor(apply);
      if (factor == 0.0F) return;
      T* slot = has_velocity ? velocity.data<T>() : nullptr;
      const auto lr = static_cast<T>(options.learning_rate);
      const auto momentum = static_cast<T>(options.momentum);
      if (factor == 1.0F && grad.dtype() == param.dtype()) {
        sgd_update<T>(param.data<T>(), grad.data<T>(), slot, param.num_elements(), lr, momentum, options.nesterov);
        return;
      }
      dispatch_gradient<T>(grad.dtype(), [&]<typename G>(G) {
        if constexpr (std::is_same_v<T, G> || std::is_same_v<T, float>) {
          sgd_update_scaled<T, G>(param.data<T>(), grad.data<G>(), static_cast<T>(factor), slot, param.num_elements(),
                                  lr, momentum, options.nesterov);
        }
      });
    });
  });
}

void adam(device::Stream& stream, const ops::kernels::AdamArgs& args) {
  dispatch_floating(args.param.dtype(), [&]<typename T>(T) {
    stream.enqueue([apply = args.apply, param = args.param, grad = args.grad, m = args.m, v = args.v, step = args.step,
                    options = args.options] {
      const float factor = gradient_factor(apply);
      if (factor == 0.0F) return;
      const auto lr = static_cast<T>(options.learning_rate);
      const auto beta1 = static_cast<T>(options.beta1);
      const auto beta2 = static_cast<T>(options.beta2);
      const auto epsilon = static_cast<T>(options.epsilon);
      if (factor == 1.0F && grad.dtype() == param.dtype()) {
        adam_update<T>(param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), param.num_elements(), lr, beta1,
                       beta2, epsilon, step);
        return;
      }
      dispatch_gradient<T>(grad.dtype(), [&]<typename G>(G) {
        if constexpr (std::is_same_v<T, G> || std::is_same_v<T, float>) {
          adam_update_scaled<T, G>(param.data<T>(), grad.data<G>(), static_cast<T>(factor), m.data<T>(), v.data<T>(),
                                   param.num_elements(), lr, beta1, beta2, epsilon, step);
        }
      });
    });
  });
}

void adam_across_peers(device::Stream& stream, const ops::kernels::AdamAcrossPeersArgs& args) {
  if (is_half(args.grads.at(0).dtype())) {  // float32 variables with 16-bit gradients (mixed_bfloat16)
    dispatch_half(args.grads[0].dtype(), [&]<typename H>(H) { enqueue_adam_across_peers<float, H>(stream, args); });
    return;
  }
  dispatch_floating(args.param.dtype(), [&]<typename T>(T) { enqueue_adam_across_peers<T, T>(stream, args); });
}

void sgd_multi(device::Stream& stream, const ops::kernels::SgdMultiArgs& args) {
  dispatch_floating(args.params[0].dtype(), [&]<typename T>(T) {
    stream.enqueue([params = args.params, grads = args.grads, velocities = args.velocities, options = args.options] {
      std::vector<SgdTensors<T>> tensors;
      tensors.reserve(params.size());
      for (std::size_t index = 0; index < params.size(); ++index) {
        tensors.push_back({.param = params[index].data<T>(),
                           .grad = grads[index].data<T>(),
                           .velocity = velocities.empty() ? nullptr : velocities[index].data<T>(),
                           .n = params[index].num_elements()});
      }
      sgd_update_multi<T>(tensors, static_cast<T>(options.learning_rate), static_cast<T>(options.momentum),
                          options.nesterov);
    });
  });
}

void adam_multi(device::Stream& stream, const ops::kernels::AdamMultiArgs& args) {
  dispatch_floating(args.params[0].dtype(), [&]<typename T>(T) {
    stream.enqueue(
        [params = args.params, grads = args.grads, m = args.m, v = args.v, step = args.step, options = args.options] {
          std::vector<AdamTensors<T>> tensors;
          tensors.reserve(params.size());
          for (std::size_t index = 0; index < params.size(); ++index) {
            tensors.push_back({.param = params[index].data<T>(),
                               .grad = grads[index].data<T>(),
                               .m = m[index].data<T>(),
                               .v = v[index].data<T>(),
                               .n = params[index].num_elements()});
          }
          adam_update_multi<T>(tensors, static_cast<T>(options.learning_rate), static_cast<T>(options.beta1),
                               static_cast<T>(options.beta2), static_cast<T>(options.epsilon), step);
        });
  });
}

}  // namespace tp::backend::cpu::op_kernels

// SPDX-License-Identifier: Apache-2.0
#pragma once
// In-place optimizer updates with Keras semantics and defaults (see backend/cpu/kernels/optimizer.hpp for the
// formulas). All tensors share one shape, dtype (f32 or f64) and device, except that a float32 parameter may
// take a float16 or bfloat16 gradient (mixed precision: widened to float32 as it is read).

#include <cstdint>

#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

struct SgdOptions {
  double learning_rate = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
};
// `velocity` may be undefined when momentum == 0.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity, const SgdOptions& options,
                const OpContext& context = {});

struct AdamOptions {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-7;
};
// `step` counts from 1 (the bias corrections use it).
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, std::int64_t step,
                 const AdamOptions& options, const OpContext& context = {});

// Conditional forms for dynamic loss scaling: `apply` is a float32 scalar [] on the parameter's device, read
// when the stream reaches the update (a graph computes it earlier in the same step from AllFinite). 0 skips
// the step: the parameter and every slot are left bitwise untouched. Any other value runs the update on
// gradient x apply: 1 uses the gradient as is, 1 / loss scale unscales a gradient that is still scaled.
void sgd_update_if(const Tensor& apply, const Tensor& param, const Tensor& grad, const Tensor& velocity,
                   const SgdOptions& options, const OpContext& context = {});
void adam_update_if(const Tensor& apply, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    std::int64_t step, const AdamOptions& options, const OpContext& context = {});

}  // namespace tp::ops

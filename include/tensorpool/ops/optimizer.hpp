#pragma once
// In-place optimizer updates with Keras semantics and defaults (see backend/cpu/kernels/optimizer.hpp for the
// formulas). All tensors share one shape, dtype (f32 or f64) and device.

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

// Conditional forms for dynamic loss scaling: the update runs only when `apply`, a float32 scalar [] on the
// parameter's device, is nonzero at the time the stream reaches it (a graph computes it earlier in the same
// step with AllFinite). Otherwise the parameter and every slot are left bitwise untouched: the step is skipped.
void sgd_update_if(const Tensor& apply, const Tensor& param, const Tensor& grad, const Tensor& velocity,
                   const SgdOptions& options, const OpContext& context = {});
void adam_update_if(const Tensor& apply, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    std::int64_t step, const AdamOptions& options, const OpContext& context = {});

}  // namespace tp::ops

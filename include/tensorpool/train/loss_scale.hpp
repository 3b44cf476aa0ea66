// SPDX-License-Identifier: Apache-2.0
#pragma once
// Dynamic loss scaling for float16 training, with Keras's defaults (LossScaleOptimizer).
//
// Each step multiplies the loss by `scale` before the gradients are built, so that small float16 gradients do
// not flush to zero, and divides the (float32) gradients of the variables by it before the update. Then:
//   - every gradient finite: the update runs; after `growth_interval` finite steps in a row the scale doubles;
//   - some gradient Inf or NaN (a float16 overflow): the update is skipped (variables and optimizer slots
//     untouched, Adam's step not counted) and the scale halves (never below 1, as tf.keras).
// The scale is always a power of two times the initial one, so scaling and unscaling are exact in float32.
// `dynamic = false` keeps the scale fixed at `initial_scale` (1: no scaling); non-finite steps are still
// skipped (counted in skipped_steps), so an overflow never reaches the float32 master weights.
//
// The state lives on the host: the graph feeds the scale as a placeholder and returns whether the step's
// gradients were finite (AllFinite). It is saved with the optimizer state (Sequential::variables() lists it
// as "loss_scale/current", "loss_scale/good_steps" and "loss_scale/skipped_steps"), so checkpoints keep it.

#include <cstdint>

namespace tp::train {

struct LossScaleOptions {
  bool dynamic = true;
  double initial_scale = 32768.0;  // 2^15
  std::int64_t growth_interval = 2000;
};

struct LossScaleState {
  double scale = 32768.0;
  std::int64_t good_steps = 0;     // finite steps since the scale last changed
  std::int64_t skipped_steps = 0;  // updates skipped in the whole run (Adam's step excludes them)

  friend bool operator==(const LossScaleState&, const LossScaleState&) = default;
};

// Invariant: scale >= 1 when dynamic (== initial_scale otherwise); 0 <= good_steps < growth_interval.
class DynamicLossScale {
 public:
  // Throws tp::InvalidArgument naming the option when initial_scale is not finite and > 0 (>= 1 when dynamic)
  // or growth_interval < 1.
  explicit DynamicLossScale(LossScaleOptions options = {});

  const LossScaleOptions& options() const noexcept { return options_; }
  const LossScaleState& state() const noexcept { return state_; }
  double scale() const noexcept { return state_.scale; }
  // Restores a saved state; throws tp::InvalidArgument when it breaks the invariant above.
  void set_state(const LossScaleState& state);
  // After a step: `finite` says whether all its gradients were finite. Returns whether its update ran.
  bool update(bool finite);

 private:
  LossScaleOptions options_;
  LossScaleState state_;
};

}  // namespace tp::train

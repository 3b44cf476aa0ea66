// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/loss_scale.hpp"

#include <algorithm>
#include <cmath>

#include "tensorpool/core/error.hpp"

namespace tp::train {

DynamicLossScale::DynamicLossScale(LossScaleOptions options) : options_(options) {
  const double minimum = options.dynamic ? 1.0 : 0.0;
  if (!std::isfinite(options.initial_scale) || options.initial_scale <= 0 || options.initial_scale < minimum) {
    TP_THROW(InvalidArgument, "train", "loss scale: initial_scale ", options.initial_scale,
             options.dynamic ? " must be finite and >= 1 for dynamic scaling" : " must be finite and > 0");
  }
  if (options.growth_interval < 1) {
    TP_THROW(InvalidArgument, "train", "loss scale: growth_interval ", options.growth_interval, " must be >= 1");
  }
  state_.scale = options.initial_scale;
}

void DynamicLossScale::set_state(const LossScaleState& state) {
  const bool scale_ok = std::isfinite(state.scale) && state.scale > 0 &&
                        (options_.dynamic ? state.scale >= 1.0 : state.scale == options_.initial_scale);
  if (!scale_ok || state.good_steps < 0 || state.good_steps >= options_.growth_interval || state.skipped_steps < 0) {
    TP_THROW(InvalidArgument, "train", "loss scale: restored state (scale ", state.scale, ", good_steps ",
             state.good_steps, ", skipped_steps ", state.skipped_steps, ") is invalid for growth_interval ",
             options_.growth_interval, options_.dynamic ? " (dynamic)" : " (fixed scale)");
  }
  state_ = state;
}

bool DynamicLossScale::update(bool finite) {
  if (!finite) {
    if (options_.dynamic) state_.scale = std::max(1.0, state_.scale / 2);
    state_.good_steps = 0;
    ++state_.skipped_steps;
    return false;
  }
  if (!options_.dynamic) return true;
  if (++state_.good_steps >= options_.growth_interval) {
    // Doubling a finite float32-representable power of two stays exact; cap where float32 would overflow.
    if (state_.scale * 2 < 3.0e38) state_.scale *= 2;
    state_.good_steps = 0;
  }
  return true;
}

}  // namespace tp::train

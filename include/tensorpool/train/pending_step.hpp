// SPDX-License-Identifier: Apache-2.0
#pragma once
// PendingStep: a training step launched on the model's devices but not yet waited for
// (Sequential::launch_train_step), so that the host prepares and launches the next step while the devices
// work on this one; wait() returns the step's loss and correct count once its work is done. Steps run in
// launch order. The model must outlive its pending steps. See runtime::PendingRun for errors.

#include <cstdint>

#include "tensorpool/runtime/pending_run.hpp"

namespace tp::train {

class Sequential;
struct StepResult;

class PendingStep {
 public:
  // Blocks until the step's work is done; rethrows a kernel error of the step (or of one launched before it).
  StepResult wait();

 private:
  friend class Sequential;
  PendingStep(runtime::PendingRun run, const Sequential& model, std::int64_t examples)
      : run_(std::move(run)), model_(&model), examples_(examples) {}

  runtime::PendingRun run_;
  const Sequential* model_;
  std::int64_t examples_;
};

}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
#pragma once
// fit() and evaluate(): the training loop of a compiled Sequential over a batched Dataset, as Keras's.
//
// fit() runs `epochs` epochs of train_step over the dataset's batches (its shuffle order per epoch), calls
// the callbacks, evaluates the validation dataset at each epoch end, and returns the history. With a
// checkpoint directory it resumes from the latest valid checkpoint there (variables, optimizer state, step,
// epoch and the batch within it: the data order is a pure function of the seed and the epoch, so a run
// killed mid-epoch continues at the same step) and saves one at each epoch end and every
// `checkpoint_every_steps` steps. A checkpoint at or past `epochs` leaves nothing to train: fit() says so on
// stderr, runs no epoch and returns with train_samples 0. A checkpoint saved by another model is refused
// (tp::InvalidArgument naming the file, the variable and both shapes). Under the multi-worker strategy every
// worker must resume from the same point (the same directory): fit() compares them first and refuses,
// naming the ranks, before any worker trains.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "tensorpool/data/dataset.hpp"
#include "tensorpool/train/callbacks.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::train {

struct FitOptions {
  std::int64_t epochs = 5;
  const data::Dataset* validation = nullptr;  // batched; evaluated at each epoch end
  std::vector<std::shared_ptr<Callback>> callbacks{};
  std::filesystem::path checkpoint_dir{};   // empty: no checkpoints
  std::int64_t checkpoint_every_steps = 0;  // 0: at epoch ends only
  // Resume from checkpoint_dir but never write there: the workers of a multi-worker job other than rank 0. They
  // still capture the state at each checkpoint, with rank 0 (ZeRO across workers gathers the shards then).
  bool write_checkpoints = true;
  // Training steps launched ahead of the one whose results the loop reads (>= 1). With 1 each step is waited
  // for before the next is launched. With 2 the host launches step k + 1 before it waits for step k, so the
  // devices never wait for the host's work between steps (the fetches, callbacks, next batch, launches);
  // then a callback's on_batch_end(k) runs while step k + 1 trains. fit() waits for every step before an
  // epoch ends (validation, checkpoints and epoch callbacks see every update). Steps run one at a time
  // (as 1) with loss scaling, per-step checkpoints and the multi-worker strategy.
  std::int64_t steps_in_flight = 1;
  // CUDA graphs (docs/cuda.md, "CUDA graphs"): from the second step of this fit on (the first warms up
  // eagerly), the streams of the model's devices capture each step's runs of kernels and copies into CUDA
  // graphs and launch them whole; off again when fit returns. The variables are the same as without. Every device of the model must be a cuda device (tp::InvalidArgument
  // naming the first that is not: graphs are CUDA's, as in PyTorch).
  bool cuda_graphs = false;
};

struct Evaluation {
  double loss = 0;
  double accuracy = 0;
  std::int64_t examples = 0;
  double seconds = 0;
};

struct FitResult {
  History history{};
  std::int64_t steps = 0;              // optimizer steps of the whole run (resumed ones included)
  std::int64_t resumed_from_step = 0;  // 0 when the run started fresh
  std::int64_t first_epoch = 0;        // the epoch the run started in (resumed: the checkpoint's; >= epochs: none)
  double train_seconds = 0;            // wall time of the training epochs run now (validation excluded)
  std::int64_t train_samples = 0;      // samples trained now
};

FitResult fit(Sequential& model, const data::Dataset& train, const FitOptions& options = {});
[[nodiscard]] Evaluation evaluate(Sequential& model, const data::Dataset& dataset);

}  // namespace tp::train

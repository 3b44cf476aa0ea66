// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the in-process and the MPI parameter-server runs share (train/parameter_server.hpp): resuming from a
// checkpoint before training, and after it: the final variables into the model, the history aggregated from
// the update log, the callbacks, validation and the checkpoint.

#include <cstdint>

#include "tensorpool/train/parameter_server.hpp"
#include "train/parameter_store.hpp"

namespace tp::train {

struct ParameterServerStart {
  std::int64_t version = 0;      // updates already applied (from the checkpoint)
  std::int64_t first_epoch = 0;  // epochs already trained
};

// Restores the latest checkpoint of options.fit.checkpoint_dir into `model`, if any.
ParameterServerStart resume_parameter_server(Sequential& model, const ParameterServerOptions& options);

// After the workers finished: fills `result` and leaves the store's variables in `model`.
void finish_parameter_server(Sequential& model, const ParameterStore& store, const ParameterServerStart& start,
                             const ParameterServerOptions& options, const data::Dataset& train, double seconds,
                             ParameterServerResult& result);

// Under mpirun: rank 0 serves, the other ranks work (parameter_server_mpi.cpp).
ParameterServerResult fit_parameter_server_mpi(Sequential& model, const data::Dataset& train,
                                               const ParameterServerOptions& options,
                                               const ParameterServerStart& start);

}  // namespace tp::train

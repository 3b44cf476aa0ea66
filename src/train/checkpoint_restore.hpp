// SPDX-License-Identifier: Apache-2.0
#pragma once
// Restoring a checkpoint into a compiled model (fit() and the parameter-server runs resume with it).

#include <filesystem>

#include "tensorpool/device/device.hpp"
#include "tensorpool/train/checkpoint.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::train {

// Copies `state`'s tensors through `host` into every replica of `model`. A checkpoint saved by another model
// (other layer widths, precision, sharding or strategy) throws tp::InvalidArgument naming the checkpoint file in
// `directory`, the variable that does not fit and both shapes, and what to do instead.
void restore_checkpoint(Sequential& model, const CheckpointState& state, device::Device& host,
                        const std::filesystem::path& directory);

}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
#include "train/checkpoint_restore.hpp"

#include <string>
#include <utility>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/train/host_tensor.hpp"

namespace tp::train {

void restore_checkpoint(Sequential& model, const CheckpointState& state, device::Device& host,
                        const std::filesystem::path& directory) {
  std::vector<std::pair<std::string, Tensor>> values;
  for (const auto& [name, tensor] : state.tensors) values.emplace_back(name, to_device(tensor, host, {.name = name}));
  try {
    model.assign_variables(values);
  } catch (const Error& error) {  // the model's variables are not the checkpoint's: which, and what to do
    TP_THROW(InvalidArgument, "train", "the checkpoint ", (directory / checkpoint_file_name(state.step)).string(),
             " (step ", state.step, ") does not fit this model (the value is the checkpoint's): ", error.what(),
             "; it was saved by another model (other hidden widths, precision, sharding or strategy): resume it "
             "with the settings it was trained with, or give another checkpoint directory (--checkpoint-dir) to "
             "start afresh");
  }
}

}  // namespace tp::train

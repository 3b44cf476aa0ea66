// SPDX-License-Identifier: Apache-2.0
#pragma once
// The concrete fix for an out-of-memory error during training, from what the caller (the CLI's train and
// profile, the Python package's fit) knows about the workload. The fixes are named as the CLI's flags.
// "Fits" is decided the way the device decides it: the plan's allocations (variables, then the step's arena)
// are replayed through a fresh stack of each device's memory configuration (same allocator, growth policy,
// limit and rounding) over scratch simulated memory (memory_estimate.hpp); no planned-bytes margin is guessed.
// The advice names: when the variables alone do not fit, what they need against what the device has; else the
// largest batch size that fits with the current allocator, the other allocator settings that make the
// requested batch fit (each replayed the same way), what the arena holds, and the optimizer state's share.
// Written into the error's report (OutOfMemoryReport::suggestion), so what() says it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/device/device.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/report/memory_estimate.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::report {

// True when every allocation of a step at `batch_size` is served by every device's allocator (replayed with
// `change` applied to its configuration). `batches_on` names the device the batches are assembled on
// (ModelSetup::batch_device), as in Sequential::plan: feeds already there take no slot.
bool batch_fits(train::Sequential& model, const std::vector<device::Device*>& devices, std::int64_t batch_size,
                const ConfigChange& change = {}, std::string_view batches_on = {});

// The largest global batch below `batch_size` that batch_fits(); 0 when not even 1 does.
std::int64_t largest_fitting_batch(train::Sequential& model, const std::vector<device::Device*>& devices,
                                   std::int64_t batch_size, std::string_view batches_on = {});

// How the advice names the settings it suggests, so each front end speaks its own language: the CLI's flags
// (the defaults) or the Python package's arguments (src/python/errors.cpp). "{}" is replaced as noted.
struct AdviceWords {
  std::string batch_size = "--batch-size {}";                            // {}: a batch size
  std::string check_estimate = "`tensorpool estimate --batch-size {}`";  // {}: a batch size
  std::string expandable = "--allocator expandable";
  std::string allow_growth = "--allow-growth {}";                      // {}: true | false
  std::string bfc_allow_growth = "--allocator bfc --allow-growth {}";  // {}: true | false
  std::string more_sim_memory = "a larger --sim-memory";
  std::string smaller_layers = "use smaller layers (--hidden)";
  std::string shard_optimizer = "--shard optimizer";  // the model's devices share the optimizer state
  std::string mirrored_shard_optimizer = "--strategy mirrored --shard optimizer";  // a one-device model
};

void add_oom_advice(OutOfMemoryError& error, train::Sequential& model, const std::vector<device::Device*>& devices,
                    std::int64_t batch_size, std::string_view batches_on = {}, const AdviceWords& words = {});

}  // namespace tp::report

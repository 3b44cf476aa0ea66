// SPDX-License-Identifier: Apache-2.0
#pragma once
// The parameter server's state (train/parameter_server.hpp): the float32 parameters and optimizer slots on
// the server's device, the version (updates applied), each worker's pushed count, and the log of updates.
//
// Invariants, all guarded by mutex_: version_ == initial version + updates_.size(); pushed_[w] counts worker
// w's updates in updates_; a pull copies the parameters and reads version_ in one critical section and a push
// applies every parameter's update in one, so a worker never sees a half-applied update. Bounded staleness
// (max_staleness_ K): worker w may start its next step when min over running workers of pushed_ >= pushed_[w] - K.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/train/layers.hpp"
#include "tensorpool/train/parameter_server.hpp"

namespace tp::train {

// True for an optimizer slot's name ("<parameter>/adam_m", "/adam_v", "/momentum").
bool is_optimizer_slot(const std::string& name);

// A worker's gradients of one step, in parameter order (any device), with the step's figures.
struct PushedGradients {
  std::int32_t worker = 0;
  std::int64_t worker_step = 0;
  std::int64_t epoch = 0;
  std::int64_t pulled_version = 0;
  std::vector<Tensor> gradients{};
  double loss = 0;
  double correct = 0;
  std::int64_t examples = 0;
};

// Receives the parameters (on the server's device, in parameter order) inside the pull's critical section.
using ParameterReceiver = std::function<void(const std::vector<Tensor>& parameters)>;

class ParameterStore {
 public:
  // `variables`: Sequential::variables() of the model (parameters then slots), copied to `device`.
  ParameterStore(const std::vector<std::pair<std::string, Tensor>>& variables, Optimizer optimizer,
                 device::Device& device, std::int64_t version, std::int32_t workers,
                 std::optional<std::int64_t> max_staleness);

  const std::vector<std::string>& parameter_names() const noexcept { return parameter_names_; }

  // Whether `worker` may start its next step now (bounded staleness).
  bool may_start(std::int32_t worker) const;
  // Waits until may_start(worker) (when `wait`; else it must already hold), then hands the parameters to
  // `receive` and returns their version. Throws tp::DeviceError after abort().
  std::int64_t pull(std::int32_t worker, const ParameterReceiver& receive, bool wait = true);
  // Applies the gradients with the optimizer (step = the new version) and records the update.
  void push(const PushedGradients& pushed);
  // The worker ran its last step: it no longer holds the others back.
  void finish(std::int32_t worker);
  // Wakes every waiting pull, which then throws (a worker failed).
  void abort();

  std::int64_t version() const;
  std::vector<UpdateRecord> updates() const;
  // Every variable (parameters and slots) copied (on the server's device), named as Sequential::variables().
  std::vector<std::pair<std::string, Tensor>> variables() const;

 private:
  bool may_start_locked(std::int32_t worker) const;
  void check_worker(std::int32_t worker) const;

  // Immutable after construction.
  device::Device& device_;
  const Optimizer optimizer_;
  const std::optional<std::int64_t> max_staleness_;
  std::vector<std::string> parameter_names_;
  std::vector<std::pair<std::string, Tensor>> variables_;  // the tensors are updated in place
  std::vector<Tensor> parameters_;                         // views of variables_' parameters, in order
  std::vector<std::vector<Tensor>> slots_;                 // per parameter: adam m, v or sgd momentum

  mutable std::mutex mutex_;  // guards everything below and the contents of the tensors above
  std::condition_variable changed_;
  std::int64_t version_;
  std::vector<std::int64_t> pushed_;
  std::vector<bool> finished_;
  std::vector<UpdateRecord> updates_;
  bool aborted_ = false;
};

}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
#include "train/parameter_store.hpp"

#include <algorithm>

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/ops/optimizer.hpp"

namespace tp::train {

namespace {

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool is_optimizer_slot(const std::string& name) {
  return ends_with(name, "/adam_m") || ends_with(name, "/adam_v") || ends_with(name, "/momentum");
}

ParameterStore::ParameterStore(const std::vector<std::pair<std::string, Tensor>>& variables, Optimizer optimizer,
                               device::Device& device, std::int64_t version, std::int32_t workers,
                               std::optional<std::int64_t> max_staleness)
    : device_(device),
      optimizer_(optimizer),
      max_staleness_(max_staleness),
      version_(version),
      pushed_(static_cast<std::size_t>(workers), 0),
      finished_(static_cast<std::size_t>(workers), false) {
  if (workers < 1) TP_THROW(InvalidArgument, "train", "parameter server: ", workers, " workers; it needs >= 1");
  const auto find = [&](const std::string& name) -> const Tensor& {
    for (const auto& [variable, tensor] : variables_) {
      if (variable == name) return tensor;
    }
    TP_THROW(InvalidArgument, "train", "parameter server: the model has no optimizer slot '", name, "'");
  };
  for (const auto& [name, tensor] : variables) {
    if (tensor.dtype() != DType::f32) {
      TP_THROW(InvalidArgument, "train", "parameter server: variable '", name, "' is ", name_of(tensor.dtype()),
               "; the server holds float32 variables only");
    }
    variables_.emplace_back(name,
                            tensor.to(device, {.name = name,
                                               .kind = is_optimizer_slot(name) ? memory::AllocationKind::optimizer_state
                                                                               : memory::AllocationKind::parameter}));
  }
  device.synchronize();
  for (const auto& [name, tensor] : variables_) {
    if (is_optimizer_slot(name)) continue;
    parameter_names_.push_back(name);
    parameters_.push_back(tensor);
    if (std::holds_alternative<Adam>(optimizer_)) {
      slots_.push_back({find(name + "/adam_m"), find(name + "/adam_v")});
    } else {
      slots_.push_back({find(name + "/momentum")});
    }
  }
}

void ParameterStore::check_worker(std::int32_t worker) const {
  if (worker < 0 || static_cast<std::size_t>(worker) >= pushed_.size()) {
    TP_THROW(InvalidArgument, "train", "parameter server: worker ", worker, " is outside 0..", pushed_.size() - 1);
  }
}

bool ParameterStore::may_start_locked(std::int32_t worker) const {
  if (!max_staleness_) return true;
  const std::int64_t own = pushed_[static_cast<std::size_t>(worker)];
  for (std::size_t other = 0; other < pushed_.size(); ++other) {
    if (!finished_[other] && pushed_[other] < own - *max_staleness_) return false;
  }
  return true;
}

bool ParameterStore::may_start(std::int32_t worker) const {
  check_worker(worker);
  std::lock_guard lock(mutex_);
  return may_start_locked(worker);
}

std::int64_t ParameterStore::pull(std::int32_t worker, const ParameterReceiver& receive, bool wait) {
  check_worker(worker);
  std::unique_lock lock(mutex_);
  if (wait) changed_.wait(lock, [&] { return aborted_ || may_start_locked(worker); });
  if (aborted_) TP_THROW(DeviceError, "train", "parameter server: worker ", worker, " stops: another worker failed");
  if (!may_start_locked(worker)) {
    TP_THROW(InvalidArgument, "train", "parameter server: worker ", worker,
             " pulled ahead of the staleness bound (internal: pull(wait = false) before may_start())");
  }
  receive(parameters_);
  return version_;
}

void ParameterStore::push(const PushedGradients& pushed) {
  check_worker(pushed.worker);
  if (pushed.gradients.size() != parameters_.size()) {
    TP_THROW(InvalidArgument, "train", "parameter server: worker ", pushed.worker, " pushed ", pushed.gradients.size(),
             " gradients for ", parameters_.size(), " parameters");
  }
  std::vector<Tensor> gradients;  // on the server's device, before taking the lock
  for (std::size_t index = 0; index < parameters_.size(); ++index) {
    const Tensor& gradient = pushed.gradients[index];
    if (gradient.shape() != parameters_[index].shape() || gradient.dtype() != DType::f32) {
      TP_THROW(InvalidArgument, "train", "parameter server: worker ", pushed.worker, "'s gradient of '",
               parameter_names_[index], "' is ", name_of(gradient.dtype()), gradient.shape(), ", not float32",
               parameters_[index].shape());
    }
    gradients.push_back(&gradient.device() == &device_
                            ? gradient
                            : gradient.to(device_, {.name = parameter_names_[index] + "/pushed_gradient"}));
  }
  std::lock_guard lock(mutex_);
  const std::int64_t step = version_ + 1;
  for (std::size_t index = 0; index < parameters_.size(); ++index) {
    if (const Adam* adam = std::get_if<Adam>(&optimizer_)) {
      ops::adam_update(
          parameters_[index], gradients[index], slots_[index][0], slots_[index][1], step,
          {.learning_rate = adam->learning_rate, .beta1 = adam->beta1, .beta2 = adam->beta2, .epsilon = adam->epsilon});
    } else {
      const Sgd& sgd = std::get<Sgd>(optimizer_);
      ops::sgd_update(parameters_[index], gradients[index], slots_[index][0],
                      {.learning_rate = sgd.learning_rate, .momentum = sgd.momentum, .nesterov = sgd.nesterov});
    }
  }
  device_.synchronize();  // the update is complete before any pull can see the new version
  updates_.push_back({.worker = pushed.worker,
                      .worker_step = pushed.worker_step,
                      .epoch = pushed.epoch,
                      .pulled_version = pushed.pulled_version,
                      .applied_version = step,
                      .staleness = version_ - pushed.pulled_version,
                      .loss = pushed.loss,
                      .correct = pushed.correct,
                      .examples = pushed.examples});
  version_ = step;
  ++pushed_[static_cast<std::size_t>(pushed.worker)];
  changed_.notify_all();
}

void ParameterStore::finish(std::int32_t worker) {
  check_worker(worker);
  std::lock_guard lock(mutex_);
  finished_[static_cast<std::size_t>(worker)] = true;
  changed_.notify_all();
}

void ParameterStore::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  changed_.notify_all();
}

std::int64_t ParameterStore::version() const {
  std::lock_guard lock(mutex_);
  return version_;
}

std::vector<UpdateRecord> ParameterStore::updates() const {
  std::lock_guard lock(mutex_);
  return updates_;
}

std::vector<std::pair<std::string, Tensor>> ParameterStore::variables() const {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<std::string, Tensor>> copies;
  for (const auto& [name, tensor] : variables_) copies.emplace_back(name, tensor.to(device_, {.name = name}));
  device_.synchronize();
  return copies;
}

}  // namespace tp::train

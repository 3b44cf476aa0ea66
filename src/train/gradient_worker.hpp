// SPDX-License-Identifier: Apache-2.0
#pragma once
// A parameter-server worker (train/parameter_server.hpp): the model's training graph rebuilt for one replica on
// the worker's device in its own Session. A step assigns the pulled parameters to the session's variables and
// fetches the loss, the correct count and every parameter's gradient (the update nodes are not run: the
// session prunes them, so the worker keeps no optimizer state). The worker loop pulls, computes and pushes
// through a ParameterSource: the in-process ParameterStore, or an MPI connection to rank 0.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/data/dataset.hpp"
#include "tensorpool/runtime/session.hpp"
#include "tensorpool/train/sequential.hpp"
#include "train/model_graph.hpp"
#include "train/parameter_store.hpp"

namespace tp::train {

class GradientWorker {
 public:
  // The graph of `model` (compiled with the parameter-server strategy) on `device` of `model`'s manager.
  GradientWorker(Sequential& model, const std::string& device, const std::string& session_name);

  const std::vector<std::string>& parameter_names() const noexcept { return parameters_; }
  const std::vector<Shape>& parameter_shapes() const noexcept { return shapes_; }
  std::int64_t parameter_elements() const noexcept { return elements_; }

  // Pull: the parameters (in parameter_names() order, on any device) become the session's variables.
  void assign(const std::vector<Tensor>& parameters);
  // The same from one host array of every parameter's float32 values end to end.
  void assign_flat(std::span<const float> values);

  // The loss (mean over the batch), correct count and gradients (on cpu:0) of one batch.
  PushedGradients compute(const Tensor& features, const Tensor& labels);
  // The memory plan of compute() on a batch of `batch_size` examples, before it runs (nothing allocated).
  runtime::MemoryPlan plan(std::int64_t batch_size);

 private:
  ModelGraph graph_;
  std::unique_ptr<runtime::Session> session_;
  device::Device* cpu_ = nullptr;
  std::vector<std::string> parameters_;
  std::vector<Shape> shapes_;
  std::int64_t elements_ = 0;
  std::int64_t features_ = 1;        // values per example
  graph::TensorType labels_type_{};  // of a batch of one example
  std::vector<std::string> fetches_;
};

// What a worker pulls from and pushes to.
class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  // Waits until `worker` may start its next step, assigns the parameters into `into`; returns their version.
  virtual std::int64_t pull(std::int32_t worker, GradientWorker& into) = 0;
  virtual void push(const PushedGradients& pushed) = 0;
  virtual void finish(std::int32_t worker) = 0;
};

// The in-process source: the store itself.
class LocalParameterSource final : public ParameterSource {
 public:
  explicit LocalParameterSource(ParameterStore& store) : store_(store) {}
  std::int64_t pull(std::int32_t worker, GradientWorker& into) override {
    return store_.pull(worker, [&](const std::vector<Tensor>& parameters) { into.assign(parameters); });
  }
  void push(const PushedGradients& pushed) override { store_.push(pushed); }
  void finish(std::int32_t worker) override { store_.finish(worker); }

 private:
  ParameterStore& store_;
};

// Worker `worker`'s loop: epochs [first_epoch, epochs) of `shard`, pull - compute - push per batch, then
// finish. `before_step` (may be empty) runs before each step. Returns the steps run.
std::int64_t run_worker_loop(GradientWorker& worker, ParameterSource& source, const data::Dataset& shard,
                             std::int32_t index, std::int64_t first_epoch, std::int64_t epochs,
                             const std::function<void(std::int32_t, std::int64_t)>& before_step);

// Creates the variables of `model` (compiled with the parameter-server strategy) in its session, initialised
// as its first step would (Sequential::variables() reads only existing ones); a no-op for existing ones.
void materialise_variables(Sequential& model);

// Worker `index` of `workers`'s shard of `train` (composed with the shard `train` already has).
data::Dataset worker_shard(const data::Dataset& train, std::int32_t index, std::int32_t workers);

}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
#include "train/gradient_worker.hpp"

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device_manager.hpp"

namespace tp::train {

namespace {

// The model's graph for one replica on `device`, as compile() built it on the server's device.
ModelGraph one_replica_graph(const Sequential& model, const std::string& device) {
  // One replica: no collective, whatever the strategy's settings.
  const Strategy one_device = Strategy::one_device(device);
  return build_model_graph(model_spec(model.input_shape(), model.layers(), model.compile_options(), one_device),
                           {device}, *make_distribution_strategy(one_device));
}

}  // namespace

void materialise_variables(Sequential& model) {
  const ModelGraph graph = one_replica_graph(model, model.strategy().parameter_device);
  model.session().run({}, graph.variables.front());  // fetching a variable creates and initialises it
}

GradientWorker::GradientWorker(Sequential& model, const std::string& device, const std::string& session_name) {
  graph_ = one_replica_graph(model, device);
  if (!graph_.loss_scale.empty() || graph_.input_dtype != DType::f32) {
    TP_THROW(InvalidArgument, "train", "parameter server: workers compute in float32 only; use precision float32");
  }
  const runtime::SessionOptions& model_session = model.session().options();
  device::DeviceManager& manager =
      model_session.devices != nullptr ? *model_session.devices : device::DeviceManager::instance();
  cpu_ = &manager.device("cpu:0");
  session_ = std::make_unique<runtime::Session>(graph_.graph, runtime::SessionOptions{
                                                                  .name = session_name,
                                                                  .default_device = device,
                                                                  .intra_op_threads = model_session.intra_op_threads,
                                                                  .gemm_library = model_session.gemm_library,
                                                                  .devices = &manager,
                                                              });
  for (const std::string& name : graph_.variables.front()) {
    if (is_optimizer_slot(name)) continue;
    parameters_.push_back(name);
    const graph::NodeId node = *graph_.graph.find(name);
    shapes_.push_back(graph_.graph.type_of({node, 0}).shape());
    elements_ += shapes_.back().num_elements();
  }
  const ReplicaNodes& nodes = graph_.replicas.front();
  if (nodes.gradients.size() != parameters_.size()) {
    TP_THROW(InvalidArgument, "train", "parameter server: the model has ", parameters_.size(), " parameters but ",
             nodes.gradients.size(), " gradients (a parameter the loss does not depend on?)");
  }
  for (std::int64_t dim : model.input_shape()) features_ *= dim;
  labels_type_ = model.compile_options().loss == Loss::sparse_categorical_crossentropy
                     ? graph::TensorType{DType::i32, {1}}
                     : graph::TensorType{DType::f32, {1, model.layers().back().units}};
  fetches_.push_back(nodes.loss);
  if (graph_.has_accuracy) fetches_.push_back(nodes.correct);
  fetches_.insert(fetches_.end(), nodes.gradients.begin(), nodes.gradients.end());
}

void GradientWorker::assign(const std::vector<Tensor>& parameters) {
  if (parameters.size() != parameters_.size()) {
    TP_THROW(InvalidArgument, "train", "parameter server: ", parameters.size(), " parameters pulled for ",
             parameters_.size());
  }
  for (std::size_t index = 0; index < parameters.size(); ++index) {
    session_->assign_variable(parameters_[index], parameters[index]);
  }
}

void GradientWorker::assign_flat(std::span<const float> values) {
  if (static_cast<std::int64_t>(values.size()) != elements_) {
    TP_THROW(InvalidArgument, "train", "parameter server: ", values.size(), " parameter values pulled; the model has ",
             elements_);
  }
  std::size_t offset = 0;
  for (std::size_t index = 0; index < parameters_.size(); ++index) {
    const auto count = static_cast<std::size_t>(shapes_[index].num_elements());
    session_->assign_variable(parameters_[index],
                              Tensor::from_vector<float>(values.subspan(offset, count), shapes_[index], *cpu_));
    offset += count;
  }
}

PushedGradients GradientWorker::compute(const Tensor& features, const Tensor& labels) {
  const std::int64_t rows = features.shape().rank() == 0 ? 0 : features.shape().dim(0);
  if (features.dtype() != DType::f32 || features.num_elements() != rows * features_) {
    TP_THROW(InvalidArgument, "train", "features are ", name_of(features.dtype()), features.shape(),
             " but the model takes float32 batches of examples with ", features_, " values");
  }
  const ReplicaNodes& nodes = graph_.replicas.front();
  runtime::FeedMap feeds;
  feeds[nodes.x] = features.reshape(Shape{rows, features_});
  feeds[nodes.labels] = labels;
  const float inverse = rows > 0 ? 1.0F / static_cast<float>(rows) : 0.0F;
  feeds[graph_.inv_global_batch] = Tensor::from_vector<float>(std::span<const float>(&inverse, 1), Shape{}, *cpu_);
  std::vector<Tensor> fetched = session_->run(feeds, fetches_);
  PushedGradients result;
  std::size_t next = 0;
  result.loss = fetched[next++].to_vector<float>().at(0);
  if (graph_.has_accuracy) result.correct = fetched[next++].to_vector<float>().at(0);
  result.examples = rows;
  result.gradients.assign(fetched.begin() + static_cast<std::ptrdiff_t>(next), fetched.end());
  return result;
}

runtime::MemoryPlan GradientWorker::plan(std::int64_t batch_size) {
  if (batch_size <= 0) TP_THROW(InvalidArgument, "train", "batch size ", batch_size, " must be positive");
  const ReplicaNodes& nodes = graph_.replicas.front();
  runtime::FeedTypes types;
  types[nodes.x] = {DType::f32, {batch_size, features_}};
  graph::TensorType labels = labels_type_;
  labels.dims.front() = batch_size;
  types[nodes.labels] = labels;
  types[graph_.inv_global_batch] = {DType::f32, {}};
  return session_->plan(types, fetches_, {});
}

std::int64_t run_worker_loop(GradientWorker& worker, ParameterSource& source, const data::Dataset& shard,
                             std::int32_t index, std::int64_t first_epoch, std::int64_t epochs,
                             const std::function<void(std::int32_t, std::int64_t)>& before_step) {
  std::int64_t step = 0;
  for (std::int64_t epoch = first_epoch; epoch < epochs; ++epoch) {
    data::BatchIterator batches = shard.epoch(epoch);
    while (std::optional<data::Batch> batch = batches.next()) {
      ++step;
      if (before_step) before_step(index, step);
      const std::int64_t version = source.pull(index, worker);
      PushedGradients pushed = worker.compute(batch->features, batch->labels);
      pushed.worker = index;
      pushed.worker_step = step;
      pushed.epoch = epoch;
      pushed.pulled_version = version;
      source.push(pushed);
    }
  }
  source.finish(index);
  return step;
}

data::Dataset worker_shard(const data::Dataset& train, std::int32_t index, std::int32_t workers) {
  // Shard i of S split W ways: positions = i (mod S) and i + w S (mod S W), a partition of shard i.
  const std::int64_t shards = train.settings().num_shards;
  return train.shard(shards * workers, train.settings().shard_index + index * shards);
}

}  // namespace tp::train

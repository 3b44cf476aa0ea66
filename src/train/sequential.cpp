#include "tensorpool/train/sequential.hpp"

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/runtime/session.hpp"
#include "train/model_graph.hpp"

namespace tp::train {

struct Sequential::Compiled {
  ModelGraph model;
  std::unique_ptr<runtime::Session> session;
  device::DeviceManager* manager = nullptr;
  CompileOptions options;
};

namespace {

std::vector<std::string> strategy_devices(const Strategy& strategy, device::DeviceManager& manager) {
  if (!strategy.devices.empty()) {
    if (strategy.kind == Strategy::Kind::one && strategy.devices.size() != 1) {
      TP_THROW(InvalidArgument, "train", "the one-device strategy takes one device, not ", strategy.devices.size());
    }
    for (const std::string& name : strategy.devices) manager.device(name);  // throws naming a missing device
    return strategy.devices;
  }
  std::vector<std::string> accelerators;
  for (device::Device* device : manager.devices()) {
    if (device->kind() != device::DeviceKind::cpu) accelerators.push_back(device->name());
  }
  if (accelerators.empty()) accelerators.push_back("cpu:0");
  if (strategy.kind == Strategy::Kind::one) accelerators.resize(1);
  return accelerators;
}

std::string strip_replica(const std::string& name) {
  return name.rfind("replica_", 0) == 0 ? name.substr(name.find('/') + 1) : name;
}

}  // namespace

Sequential::Sequential(std::vector<std::int64_t> input_shape, std::vector<Dense> layers)
    : input_shape_(std::move(input_shape)), layers_(std::move(layers)) {}

Sequential::~Sequential() = default;

void Sequential::add(Dense layer) {
  if (compiled_ != nullptr) TP_THROW(InvalidArgument, "train", "add() after compile(): build the model first");
  layers_.push_back(std::move(layer));
}

void Sequential::compile(const CompileOptions& options, const Strategy& strategy, runtime::SessionOptions session) {
  auto compiled = std::make_unique<Compiled>();
  compiled->manager = session.devices != nullptr ? session.devices : &device::DeviceManager::instance();
  compiled->options = options;
  devices_ = strategy_devices(strategy, *compiled->manager);
  ModelSpec spec{input_shape_,        layers_,     options.optimizer, options.loss, options.from_logits,
                 strategy.all_reduce, options.seed};
  compiled->model = build_model_graph(spec, devices_);
  session.devices = compiled->manager;
  if (session.default_device.empty()) session.default_device = devices_.front();
  compiled->session = std::make_unique<runtime::Session>(compiled->model.graph, std::move(session));
  compiled_ = std::move(compiled);
}

runtime::Session& Sequential::session() {
  if (compiled_ == nullptr) TP_THROW(InvalidArgument, "train", "the model is not compiled; call compile() first");
  return *compiled_->session;
}

bool Sequential::has_accuracy() const { return compiled_ != nullptr && compiled_->model.has_accuracy; }

runtime::FeedMap Sequential::feeds(const Tensor& features, const Tensor* labels) const {
  if (compiled_ == nullptr) TP_THROW(InvalidArgument, "train", "the model is not compiled; call compile() first");
  const std::int64_t rows = features.shape().rank() == 0 ? 0 : features.shape().dim(0);
  std::int64_t per_example = 1;
  for (std::int64_t dim : input_shape_) per_example *= dim;
  if (features.num_elements() != rows * per_example || features.dtype() != DType::f32) {
    TP_THROW(InvalidArgument, "train", "features are ", name_of(features.dtype()), features.shape(),
             " but the model takes float32 batches of examples with ", per_example, " values");
  }
  if (labels != nullptr && (labels->shape().rank() == 0 || labels->shape().dim(0) != rows)) {
    TP_THROW(InvalidArgument, "train", "labels ", labels->shape(), " do not match the ", rows,
             " examples of the batch");
  }
  const Tensor flat = features.reshape(Shape{rows, per_example});
  runtime::FeedMap feeds;
  const auto replicas = static_cast<std::int64_t>(devices_.size());
  for (std::int64_t replica = 0; replica < replicas; ++replica) {
    // Rows split as evenly as possible: the first (rows % replicas) replicas take one more.
    const std::int64_t begin = replica * (rows / replicas) + std::min(replica, rows % replicas);
    const std::int64_t end = begin + rows / replicas + (replica < rows % replicas ? 1 : 0);
    const ReplicaNodes& nodes = compiled_->model.replicas[static_cast<std::size_t>(replica)];
    feeds[nodes.x] = flat.slice(begin, end);
    if (labels != nullptr) feeds[nodes.labels] = labels->slice(begin, end);
  }
  const float inverse = rows > 0 ? 1.0F / static_cast<float>(rows) : 0.0F;
  feeds[compiled_->model.inv_global_batch] =
      Tensor::from_vector<float>(std::span<const float>(&inverse, 1), Shape{}, compiled_->manager->device("cpu:0"));
  return feeds;
}

std::vector<std::string> Sequential::loss_and_correct_fetches() const {
  std::vector<std::string> fetches;
  for (const ReplicaNodes& nodes : compiled_->model.replicas) {
    fetches.push_back(nodes.loss);
    if (compiled_->model.has_accuracy) fetches.push_back(nodes.correct);
  }
  return fetches;
}

StepResult Sequential::collect(const std::vector<Tensor>& fetched, std::int64_t examples) const {
  StepResult result;
  result.examples = examples;
  const std::size_t stride = compiled_->model.has_accuracy ? 2 : 1;
  for (std::size_t index = 0; index < fetched.size(); index += stride) {
    result.loss += fetched[index].to_vector<float>().at(0);
    if (stride == 2) result.correct += fetched[index + 1].to_vector<float>().at(0);
  }
  return result;
}

StepResult Sequential::train_step(const Tensor& features, const Tensor& labels, std::int64_t step) {
  const runtime::FeedMap batch = feeds(features, &labels);
  const auto fetched = session().run(batch, loss_and_correct_fetches(), compiled_->model.updates, {.step = step});
  return collect(fetched, features.shape().dim(0));
}

StepResult Sequential::test_step(const Tensor& features, const Tensor& labels) {
  const runtime::FeedMap batch = feeds(features, &labels);
  return collect(session().run(batch, loss_and_correct_fetches()), features.shape().dim(0));
}

Tensor Sequential::predict_step(const Tensor& features) {
  runtime::FeedMap batch = feeds(features, nullptr);
  std::vector<std::string> fetches;
  for (const ReplicaNodes& nodes : compiled_->model.replicas) fetches.push_back(nodes.predictions);
  const std::vector<Tensor> parts = session().run(batch, fetches);
  const std::int64_t rows = features.shape().dim(0);
  const std::int64_t units = layers_.back().units;
  Tensor result = Tensor::empty(Shape{rows, units}, DType::f32, compiled_->manager->device("cpu:0"));
  std::int64_t row = 0;
  for (const Tensor& part : parts) {
    const std::int64_t part_rows = part.shape().dim(0);
    device::copy(part.device().stream(0), part.buffer(), part.offset_bytes(), result.device().stream(0),
                 result.buffer(), result.slice(row, row + part_rows).offset_bytes(), part.nbytes());
    row += part_rows;
  }
  return result;
}

runtime::MemoryPlan Sequential::plan(std::int64_t batch_size) {
  if (batch_size <= 0) TP_THROW(InvalidArgument, "train", "batch size ", batch_size, " must be positive");
  std::int64_t per_example = 1;
  for (std::int64_t dim : input_shape_) per_example *= dim;
  runtime::FeedTypes types;
  const auto replicas = static_cast<std::int64_t>(devices_.size());
  for (std::int64_t replica = 0; replica < replicas; ++replica) {
    const std::int64_t rows = batch_size / replicas + (replica < batch_size % replicas ? 1 : 0);
    const ReplicaNodes& nodes = compiled_->model.replicas[static_cast<std::size_t>(replica)];
    types[nodes.x] = {DType::f32, {rows, per_example}};
    types[nodes.labels] = compiled_->options.loss == Loss::sparse_categorical_crossentropy
                              ? graph::TensorType{DType::i32, {rows}}
                              : graph::TensorType{DType::f32, {rows, layers_.back().units}};
  }
  types[compiled_->model.inv_global_batch] = {DType::f32, {}};
  return session().plan(types, loss_and_correct_fetches(), compiled_->model.updates);
}

std::vector<std::pair<std::string, Tensor>> Sequential::variables() {
  std::vector<std::pair<std::string, Tensor>> values;
  for (const std::string& name : compiled_->model.variables.at(0)) {
    values.emplace_back(strip_replica(name), session().read_variable(name));
  }
  return values;
}

void Sequential::assign_variables(const std::vector<std::pair<std::string, Tensor>>& values) {
  for (const std::vector<std::string>& replica : compiled_->model.variables) {
    for (const std::string& name : replica) {
      const std::string base = strip_replica(name);
      const auto found =
          std::find_if(values.begin(), values.end(), [&](const auto& entry) { return entry.first == base; });
      if (found == values.end()) TP_THROW(DataError, "train", "the restored state has no variable '", base, "'");
      session().assign_variable(name, found->second);
    }
  }
}

Activation parse_activation(std::string_view text) {
  if (text == "linear") return Activation::linear;
  if (text == "relu") return Activation::relu;
  if (text == "softmax") return Activation::softmax;
  TP_THROW(InvalidArgument, "train", "activation '", text, "' is not linear, relu or softmax");
}

std::string_view to_string(Activation activation) noexcept {
  switch (activation) {
    case Activation::linear:
      return "linear";
    case Activation::relu:
      return "relu";
    case Activation::softmax:
      return "softmax";
  }
  return "linear";
}

}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/sequential.hpp"

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/graph/attributes.hpp"
#include "tensorpool/ops/cast.hpp"
#include "tensorpool/runtime/session.hpp"
#include "tensorpool/train/distribution_strategy.hpp"
#include "train/model_graph.hpp"

namespace tp::train {

struct Sequential::Compiled {
  ModelGraph model;
  std::unique_ptr<runtime::Session> session;
  device::DeviceManager* manager = nullptr;
  CompileOptions options;
  std::unique_ptr<DistributionStrategy> distribution;  // everything that differs between strategies
  std::optional<DynamicLossScale> loss_scale;          // when the graph scales the loss (some layer in float16)
  int workers = 1;                                     // processes of a multi-worker job (MPI world size)
  int rank = 0;                                        // this worker's
};

namespace {

constexpr char kLossScaleCurrent[] = "loss_scale/current";
constexpr char kLossScaleGoodSteps[] = "loss_scale/good_steps";
constexpr char kLossScaleSkippedSteps[] = "loss_scale/skipped_steps";

// After the host wrote the parameters: each persistent compute copy set to the cast of its parameter again (the
// updates keep them so; ModelGraph::compute_copies).
void refresh_compute_copies(runtime::Session& session, const ModelGraph& model) {
  for (const auto& [copy, parameter] : model.compute_copies) {
    const DType dtype = graph::attribute_dtype(model.graph.node(*model.graph.find(copy)), "dtype");
    const Tensor value = ops::cast(session.read_variable(parameter), dtype);
    value.device().synchronize();
    session.assign_variable(copy, value);
  }
}

}  // namespace

Sequential::Sequential(std::vector<std::int64_t> input_shape, std::vector<Dense> layers)
    : input_shape_(std::move(input_shape)), layers_(std::move(layers)) {}

Sequential::~Sequential() = default;

void Sequential::add(Dense layer) {
  if (compiled_ != nullptr) TP_THROW(InvalidArgument, "train", "add() after compile(): build the model first");
  layers_.push_back(std::move(layer));
}

ModelSpec model_spec(const std::vector<std::int64_t>& input_shape, const std::vector<Dense>& layers,
                     const CompileOptions& options, const Strategy& strategy) {
  return {.input_shape = input_shape,
          .layers = layers,
          .optimizer = options.optimizer,
          .loss = options.loss,
          .from_logits = options.from_logits,
          .all_reduce = strategy.all_reduce,
          .bucket_bytes = strategy.bucket_bytes,
          .shard = strategy.shard,
          .fuse_update = strategy.fuse_update,
          .multi_tensor_update = strategy.multi_tensor_update,
          .seed = options.seed,
          .policy = options.policy,
          .loss_scale = options.loss_scale};
}

void Sequential::compile(const CompileOptions& options, const Strategy& strategy, runtime::SessionOptions session) {
  auto compiled = std::make_unique<Compiled>();
  compiled->manager = session.devices != nullptr ? session.devices : &device::DeviceManager::instance();
  compiled->options = options;
  compiled->distribution = make_distribution_strategy(strategy);
  devices_ = compiled->distribution->prepare(*compiled->manager, options, layers_);
  compiled->workers = compiled->distribution->workers();
  compiled->rank = compiled->distribution->rank();
  ModelSpec spec = model_spec(input_shape_, layers_, options, compiled->distribution->description());
  spec.workers = compiled->workers;
  spec.rank = compiled->rank;
  compiled->model = build_model_graph(spec, devices_, *compiled->distribution);
  if (!compiled->model.loss_scale.empty()) compiled->loss_scale.emplace(options.loss_scale);
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

const CompileOptions& Sequential::compile_options() const {
  if (compiled_ == nullptr) TP_THROW(InvalidArgument, "train", "the model is not compiled; call compile() first");
  return compiled_->options;
}

Shard Sequential::shard() const {
  if (compiled_ == nullptr) TP_THROW(InvalidArgument, "train", "the model is not compiled; call compile() first");
  return compiled_->model.shard;
}

const Strategy& Sequential::strategy() const {
  if (compiled_ == nullptr) TP_THROW(InvalidArgument, "train", "the model is not compiled; call compile() first");
  return compiled_->distribution->description();
}

const DistributionStrategy& Sequential::distribution() const {
  if (compiled_ == nullptr) TP_THROW(InvalidArgument, "train", "the model is not compiled; call compile() first");
  return *compiled_->distribution;
}

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
  Tensor flat = features.reshape(Shape{rows, per_example});
  if (compiled_->model.input_dtype != flat.dtype()) {
    // The first layer computes in float16 / bfloat16: convert on the features' device (the host, for a staged
    // dataset) so that half the bytes travel to the replicas' devices.
    // A batch staged in an accelerator's shared memory is cast there too: the step reads the result in place
    // as it would the batch, and the device memory holds only what the step's plan says.
    device::Device& device = flat.device();
    if (!device.host_accessible() && device.shared_memory() != nullptr) {
      const DType dtype = compiled_->model.input_dtype;
      Tensor cast = Tensor::from_buffer(
          device.allocate_shared(byte_size(flat.shape(), dtype),
                                 {.name = "train/input_cast", .kind = memory::AllocationKind::staging}),
          0, flat.shape(), dtype);
      ops::cast_into(flat, cast);
      flat = std::move(cast);
    } else {
      flat = ops::cast(flat, compiled_->model.input_dtype, {.output = {.name = "train/input_cast"}});
    }
    device.stream(0).synchronize();
  }
  runtime::FeedMap feeds;
  // Every worker holds the same global batch; replica g of the job (g = rank x local replicas + local) takes
  // its rows: split as evenly as possible, the first (rows % replicas) replicas take one more.
  const auto local_replicas = static_cast<std::int64_t>(devices_.size());
  const std::int64_t replicas = local_replicas * compiled_->workers;
  for (std::int64_t local = 0; local < local_replicas; ++local) {
    const std::int64_t replica = compiled_->rank * local_replicas + local;
    const std::int64_t begin = replica * (rows / replicas) + std::min(replica, rows % replicas);
    const std::int64_t end = begin + rows / replicas + (replica < rows % replicas ? 1 : 0);
    const ReplicaNodes& nodes = compiled_->model.replicas[static_cast<std::size_t>(local)];
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
  compiled_->distribution->reduce_step_result(result.loss, result.correct);
  return result;
}

StepResult Sequential::train_step(const Tensor& features, const Tensor& labels, std::int64_t step) {
  if (compiled_ != nullptr) compiled_->distribution->check_step(StepCall::train);
  runtime::FeedMap batch = feeds(features, &labels);
  std::vector<std::string> fetches = loss_and_correct_fetches();
  std::optional<DynamicLossScale>& loss_scale = compiled_->loss_scale;
  std::int64_t optimizer_step = step;
  if (loss_scale) {
    const auto scale = static_cast<float>(loss_scale->scale());
    batch[compiled_->model.loss_scale] =
        Tensor::from_vector<float>(std::span<const float>(&scale, 1), Shape{}, compiled_->manager->device("cpu:0"));
    fetches.push_back(compiled_->model.replicas.front().all_finite);  // every replica decides alike
    optimizer_step = step - loss_scale->state().skipped_steps;        // Keras: skipped steps do not count
  }
  std::vector<Tensor> fetched = session().run(batch, fetches, compiled_->model.updates, {.step = optimizer_step});
  if (loss_scale) {
    loss_scale->update(fetched.back().to_vector<float>().at(0) != 0.0F);
    fetched.pop_back();
  }
  return collect(fetched, features.shape().dim(0));
}

PendingStep Sequential::launch_train_step(const Tensor& features, const Tensor& labels, std::int64_t step) {
  if (compiled_ != nullptr) {
    compiled_->distribution->check_step(StepCall::launch);
    if (compiled_->loss_scale) {
      TP_THROW(InvalidArgument, "train",
               "launch_train_step with loss scaling: each step's loss scale follows from the previous step's "
               "gradients; call train_step");
    }
  }
  runtime::PendingRun run = session().run_async(feeds(features, &labels), loss_and_correct_fetches(),
                                                compiled_->model.updates, {.step = step});
  return PendingStep(std::move(run), *this, features.shape().dim(0));
}

StepResult PendingStep::wait() { return model_->collect(run_.wait(), examples_); }

std::optional<LossScaleState> Sequential::loss_scale_state() const {
  if (compiled_ == nullptr || !compiled_->loss_scale) return std::nullopt;
  return compiled_->loss_scale->state();
}

StepResult Sequential::test_step(const Tensor& features, const Tensor& labels) {
  const runtime::FeedMap batch = feeds(features, &labels);
  return collect(session().run(batch, loss_and_correct_fetches()), features.shape().dim(0));
}

Tensor Sequential::predict_step(const Tensor& features) {
  if (compiled_ != nullptr && compiled_->workers > 1) {
    TP_THROW(InvalidArgument, "train",
             "predict_step under the multi-worker strategy: each worker holds only its "
             "rows' predictions; predict with a one-device or mirrored model (load the checkpoint there)");
  }
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

runtime::MemoryPlan Sequential::plan(std::int64_t batch_size, std::string_view batches_on) {
  if (batch_size <= 0) TP_THROW(InvalidArgument, "train", "batch size ", batch_size, " must be positive");
  std::int64_t per_example = 1;
  for (std::int64_t dim : input_shape_) per_example *= dim;
  runtime::FeedTypes types;
  runtime::FeedDevices fed_on;
  const auto local_replicas = static_cast<std::int64_t>(devices_.size());
  const std::int64_t replicas = local_replicas * compiled_->workers;  // `batch_size` is the global batch
  for (std::int64_t local = 0; local < local_replicas; ++local) {
    const std::int64_t replica = compiled_->rank * local_replicas + local;
    const std::int64_t rows = batch_size / replicas + (replica < batch_size % replicas ? 1 : 0);
    const ReplicaNodes& nodes = compiled_->model.replicas[static_cast<std::size_t>(local)];
    types[nodes.x] = {compiled_->model.input_dtype, {rows, per_example}};
    types[nodes.labels] = compiled_->options.loss == Loss::sparse_categorical_crossentropy
                              ? graph::TensorType{DType::i32, {rows}}
                              : graph::TensorType{DType::f32, {rows, layers_.back().units}};
    if (!batches_on.empty() && devices_[static_cast<std::size_t>(local)] == batches_on) {
      fed_on[nodes.x] = std::string(batches_on);
      fed_on[nodes.labels] = std::string(batches_on);
    }
  }
  types[compiled_->model.inv_global_batch] = {DType::f32, {}};
  if (!compiled_->model.loss_scale.empty()) types[compiled_->model.loss_scale] = {DType::f32, {}};
  return session().plan(types, loss_and_correct_fetches(), compiled_->model.updates, fed_on);
}

StepBytes Sequential::step_bytes(const runtime::MemoryPlan& plan, std::string_view device) const {
  if (compiled_ == nullptr) TP_THROW(InvalidArgument, "train", "the model is not compiled; call compile() first");
  return train::step_bytes(plan, compiled_->model.graph, device);
}

std::vector<std::pair<std::string, Tensor>> Sequential::variables() {
  std::vector<std::pair<std::string, Tensor>> values;
  // Replicated variables ("replica_<r>/...", equal on every replica) once, from replica 0; a replica's own
  // (sharded optimizer state, "shard_<r>/...") from each; named by the strategy's checkpoint layout.
  for (std::size_t replica = 0; replica < compiled_->model.variables.size(); ++replica) {
    for (const std::string& name : compiled_->model.variables[replica]) {
      if (replica > 0 && DistributionStrategy::checkpoint_name(name) != name) continue;
      compiled_->distribution->append_variable(name, session().read_variable(name), values);
    }
  }
  if (compiled_->loss_scale) {  // saved with the optimizer state, as Keras's LossScaleOptimizer variables
    const LossScaleState& state = compiled_->loss_scale->state();
    device::Device& host = compiled_->manager->device("cpu:0");
    const auto scale = static_cast<float>(state.scale);
    values.emplace_back(kLossScaleCurrent,
                        Tensor::from_vector<float>(std::span<const float>(&scale, 1), Shape{}, host));
    values.emplace_back(kLossScaleGoodSteps, Tensor::from_vector<std::int64_t>(
                                                 std::span<const std::int64_t>(&state.good_steps, 1), Shape{}, host));
    values.emplace_back(
        kLossScaleSkippedSteps,
        Tensor::from_vector<std::int64_t>(std::span<const std::int64_t>(&state.skipped_steps, 1), Shape{}, host));
  }
  return values;
}

void Sequential::broadcast_variables(int root) {
  if (compiled_ == nullptr) TP_THROW(InvalidArgument, "train", "the model is not compiled; call compile() first");
  if (root < 0 || root >= compiled_->workers) {
    TP_THROW(InvalidArgument, "train", "broadcast_variables: root ", root, " is not a rank of this job (0..",
             compiled_->workers - 1, ")");
  }
  if (compiled_->workers <= 1) return;
  const std::vector<std::vector<std::string>>& replicas = compiled_->model.variables;
  session().run({}, replicas[0]);  // fetching creates and initialises the variables a first step would
  for (std::size_t index = 0; index < replicas[0].size(); ++index) {
    if (replicas[0][index].rfind("shard_", 0) == 0) continue;  // a worker's own optimizer-state shard
    const Tensor local = session().read_variable(replicas[0][index]);
    std::vector<float> values = local.to_vector<float>();
    distribute::mpi_broadcast(values.data(), values.size() * sizeof(float), root);
    const Tensor value = Tensor::from_vector<float>(values, local.shape(), local.device());
    for (const std::vector<std::string>& replica : replicas) session().assign_variable(replica[index], value);
  }
  refresh_compute_copies(session(), compiled_->model);
}

void Sequential::assign_variables(const std::vector<std::pair<std::string, Tensor>>& values) {
  for (const std::vector<std::string>& replica : compiled_->model.variables) {
    for (const std::string& name : replica) {
      const std::string base = DistributionStrategy::checkpoint_name(name);
      const auto found =
          std::find_if(values.begin(), values.end(), [&](const auto& entry) { return entry.first == base; });
      if (found == values.end()) TP_THROW(DataError, "train", "the restored state has no variable '", base, "'");
      session().assign_variable(name, found->second);
    }
  }
  refresh_compute_copies(session(), compiled_->model);
  if (compiled_->loss_scale) {
    const auto scalar = [&](const char* name) -> const Tensor& {
      const auto found =
          std::find_if(values.begin(), values.end(), [&](const auto& entry) { return entry.first == name; });
      if (found == values.end()) TP_THROW(DataError, "train", "the restored state has no variable '", name, "'");
      if (found->second.num_elements() != 1) {
        TP_THROW(DataError, "train", "'", name, "' holds ", found->second.shape(), "; a scalar is expected");
      }
      return found->second;
    };
    const Tensor& current = scalar(kLossScaleCurrent);
    const Tensor& good = scalar(kLossScaleGoodSteps);
    const Tensor& skipped = scalar(kLossScaleSkippedSteps);
    if (current.dtype() != DType::f32 || good.dtype() != DType::i64 || skipped.dtype() != DType::i64) {
      TP_THROW(DataError, "train", "the restored loss-scale state must be float32 current and int64 step counts");
    }
    compiled_->loss_scale->set_state({.scale = current.to_vector<float>().at(0),
                                      .good_steps = good.to_vector<std::int64_t>().at(0),
                                      .skipped_steps = skipped.to_vector<std::int64_t>().at(0)});
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
    case Activation::linear: return "linear";
    case Activation::relu: return "relu";
    case Activation::softmax: return "softmax";
  }
  return "linear";
}

}  // namespace tp::train

// SPDX-License-Identifier: Apache-2.0
// _tensorpool.Sequential: tp::train::Sequential with compile, fit, evaluate, predict, and its weights on the
// atomic checkpoints. tensorpool.keras (Python) gives them Keras's names. fit() runs tp::train::fit, the loop
// `tensorpool train` runs, with the CLI's settings (CPU kernel threads, GEMM library, staging device, prefetch,
// steps in flight) and the GIL released; Python is reached only through PythonCallbacks at the loop's hooks.
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <optional>
#include <span>
#include <thread>

#include "python/bindings.hpp"
#include "python/errors.hpp"
#include "python/numpy_array.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/data/dataset.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/train/checkpoint.hpp"
#include "tensorpool/train/distribution_strategy.hpp"
#include "tensorpool/train/fit.hpp"
#include "tensorpool/train/progress_bar.hpp"
#include "tensorpool/train/sequential.hpp"
#include "train/checkpoint_restore.hpp"

namespace tp::python {
namespace {

using HostArray = nb::ndarray<nb::numpy, nb::c_contig, nb::device::cpu>;

// Thrown by PythonCallbacks when a Python callback set `model.stop_training`: fit() unwinds from that hook
// (waiting for its steps in flight) and the binding returns normally, as Keras stops.
struct StopTraining {};

// Bridges the loop's hooks to the Python dispatcher (tensorpool.keras.callbacks._Dispatcher, which the caller
// keeps alive for the whole call, so a borrowed handle is enough and nothing here touches reference counts
// without the GIL). Every hook takes the GIL and checks for signals first: the loop runs with the GIL
// released, so Ctrl-C is seen only here. on_batch_end calls into Python only when some Python callback has a
// batch hook. A Python exception (a callback's, or KeyboardInterrupt) leaves as nb::python_error through
// fit(), which waits for its steps in flight while unwinding, so the variables hold every launched update.
class PythonCallbacks final : public train::Callback {
 public:
  PythonCallbacks(nb::handle dispatcher, bool batch_hooks) : dispatcher_(dispatcher), batch_hooks_(batch_hooks) {}

  void on_train_begin(const train::TrainInfo& info) override {
    nb::gil_scoped_acquire gil;
    check_signals();
    stop_if(dispatcher_.attr("_on_train_begin")(info.epochs, info.initial_epoch, info.batches_per_epoch,
                                                info.samples_per_epoch));
  }
  void on_epoch_begin(std::int64_t epoch) override {
    nb::gil_scoped_acquire gil;
    check_signals();
    stop_if(dispatcher_.attr("_on_epoch_begin")(epoch));
  }
  void on_batch_end(const train::BatchLogs& logs) override {
    nb::gil_scoped_acquire gil;
    check_signals();
    if (!batch_hooks_) return;
    stop_if(dispatcher_.attr("_on_batch_end")(logs.epoch, logs.batch, logs.step, logs.loss, logs.accuracy));
  }
  void on_epoch_end(const train::EpochLogs& logs) override {
    nb::gil_scoped_acquire gil;
    check_signals();
    stop_if(dispatcher_.attr("_on_epoch_end")(logs.epoch, logs.loss, logs.accuracy, logs.val_loss, logs.val_accuracy,
                                              logs.seconds, logs.samples_per_second));
  }
  void on_train_end(const train::History& history) override {
    static_cast<void>(history);
    nb::gil_scoped_acquire gil;
    check_signals();
    dispatcher_.attr("_on_train_end")();
  }

 private:
  static void check_signals() {
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
  static void stop_if(const nb::object& stop) {
    if (nb::cast<bool>(stop)) throw StopTraining{};
  }

  nb::handle dispatcher_;
  bool batch_hooks_;
};

// Where the batches are assembled, as `tensorpool train` chooses (cli::ModelSetup::batch_device): the model's
// one device when it has shared memory and the strategy runs in this process alone, so a step reads its batch
// in place; cpu:0 otherwise.
device::Device& batch_device(train::Sequential& model) {
  device::DeviceManager& manager = *model.session().options().devices;
  if (model.devices().size() == 1 && model.distribution().single_process()) {
    device::Device& device = manager.device(model.devices().front());
    if (device.shared_memory() != nullptr) return device;
  }
  return manager.device("cpu:0");
}

data::Dataset staged(const data::Dataset& dataset, device::Device& device) {
  return device.name() == "cpu:0" ? dataset : dataset.stage_on(device);
}

train::Optimizer optimizer_of(const std::string& name, double learning_rate, double beta_1, double beta_2,
                              double epsilon, double momentum, bool nesterov) {
  if (name == "adam") return train::Adam{learning_rate, beta_1, beta_2, epsilon};
  if (name == "sgd") return train::Sgd{learning_rate, momentum, nesterov};
  TP_THROW(InvalidArgument, "keras", "compile: optimizer '", name, "' is not 'adam' or 'sgd'");
}

train::Loss loss_of(const std::string& name) {
  if (name == "sparse_categorical_crossentropy") return train::Loss::sparse_categorical_crossentropy;
  if (name == "mean_squared_error") return train::Loss::mean_squared_error;
  TP_THROW(InvalidArgument, "keras", "compile: loss '", name,
           "' is not 'sparse_categorical_crossentropy' or 'mean_squared_error'");
}

void compile(train::Sequential& model, const std::string& optimizer, double learning_rate, double beta_1, double beta_2,
             double epsilon, double momentum, bool nesterov, const std::string& loss, bool from_logits,
             std::uint64_t seed, const std::string& policy, nb::handle strategy) {
  train::CompileOptions options{
      .optimizer = optimizer_of(optimizer, learning_rate, beta_1, beta_2, epsilon, momentum, nesterov),
      .loss = loss_of(loss),
      .from_logits = from_logits,
      .seed = seed,
      .policy = train::DTypePolicy::from_name(policy, "mixed_precision policy")};
  const train::Strategy spec = strategy.is_none() ? train::Strategy::one_device() : nb::cast<train::Strategy>(strategy);
  nb::gil_scoped_release release;
  model.compile(options, spec, {.name = "keras"});
  // `tensorpool train`'s rule: each CPU kernel gets the cores divided between the replicas. The GEMM library
  // stays the devices' own: "auto" (per shape, the faster one by measurement) unless TP_GEMM says otherwise.
  const auto cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const device::KernelOptions kernels{
      .intra_op_threads = std::max(1, cores / static_cast<int>(std::max<std::size_t>(1, model.replicas())))};
  device::DeviceManager& manager = *model.session().options().devices;
  manager.device("cpu:0").configure_kernels(kernels);
  for (const std::string& name : model.devices()) {
    if (name != "cpu:0") manager.device(name).configure_kernels(kernels);
  }
}

nb::dict fit(train::Sequential& model, const data::Dataset& examples, std::int64_t epochs,
             const data::Dataset* validation, nb::handle dispatcher, bool batch_hooks, int verbose,
             const std::string& checkpoint_dir, std::int64_t checkpoint_every_steps, std::int64_t steps_in_flight) {
  device::Device& staging = batch_device(model);
  const data::Dataset train_batches = staged(examples, staging);
  std::optional<data::Dataset> validation_batches;
  if (validation != nullptr) validation_batches = staged(*validation, staging);
  // As `tensorpool train`: in a multi-worker job rank 0 alone writes checkpoints and shows progress.
  const bool chief = model.distribution().rank() == 0;
  train::FitOptions options{.epochs = epochs,
                            .validation = validation_batches ? &*validation_batches : nullptr,
                            .checkpoint_dir = checkpoint_dir,
                            .checkpoint_every_steps = checkpoint_every_steps,
                            .write_checkpoints = chief,
                            .steps_in_flight = steps_in_flight};
  // verbose 1: the Keras progress bar (one line per epoch when stdout is not a terminal); 2: one line per epoch.
  // Not for the parameter-server strategy's own loop, whose workers' steps interleave (the CLI shows none).
  if (verbose > 0 && chief && !model.distribution().runs_own_loop()) {
    options.callbacks.push_back(
        std::make_shared<train::ProgressBar>(std::cout, verbose == 1 && train::stdout_is_terminal()));
  }
  options.callbacks.push_back(std::make_shared<PythonCallbacks>(dispatcher, batch_hooks));
  train::FitResult result;
  bool stopped = false;
  {
    nb::gil_scoped_release release;
    try {
      result = train::fit(model, train_batches, options);
    } catch (const StopTraining&) {
      stopped = true;
    } catch (OutOfMemoryError& error) {  // the fix `tensorpool train` suggests, in the error (errors.hpp)
      add_oom_advice(error, model, examples.settings().batch_size, staging.name());
      throw;
    }
  }
  nb::dict out;
  out["steps"] = result.steps;
  out["resumed_from_step"] = result.resumed_from_step;
  out["first_epoch"] = result.first_epoch;
  out["train_seconds"] = result.train_seconds;
  out["train_samples"] = result.train_samples;
  out["stopped"] = stopped;
  return out;
}

nb::tuple evaluate(train::Sequential& model, const data::Dataset& dataset) {
  train::Evaluation evaluation;
  {
    nb::gil_scoped_release release;
    evaluation = train::evaluate(model, staged(dataset, batch_device(model)));
  }
  return nb::make_tuple(evaluation.loss, evaluation.accuracy, evaluation.examples);
}

// The output layer's values for every example, in order: the features batched through a Dataset (its pinned
// staging and prefetch, as fit's batches) and each batch's predict_step copied into one array.
nb::object predict(train::Sequential& model, const HostArray& features, std::int64_t batch_size) {
  if (features.dtype() != nb::dtype<float>() || features.ndim() < 1 || features.ndim() > 4 || features.shape(0) == 0) {
    TP_THROW(InvalidArgument, "keras", "predict: x must be float32 with 1 to 4 dimensions and at least one example");
  }
  if (batch_size < 1) TP_THROW(InvalidArgument, "keras", "predict: batch_size ", batch_size, " must be >= 1");
  std::vector<std::int64_t> dims;
  for (std::size_t axis = 0; axis < features.ndim(); ++axis)
    dims.push_back(static_cast<std::int64_t>(features.shape(axis)));
  const std::int64_t examples = dims[0];
  data::IdxArray inputs = data::IdxArray::of<float>(
      dims, std::span<const float>(static_cast<const float*>(features.data()), features.size()));
  const std::vector<std::int32_t> zeros(static_cast<std::size_t>(examples), 0);
  data::IdxArray labels = data::IdxArray::of<std::int32_t>({examples}, std::span<const std::int32_t>(zeros));
  const std::int64_t units = model.layers().back().units;
  std::vector<float> out;
  {
    nb::gil_scoped_release release;
    const data::Dataset dataset =
        staged(data::Dataset::from_arrays(std::move(inputs), std::move(labels)).batch(batch_size).prefetch(2),
               batch_device(model));
    out.reserve(static_cast<std::size_t>(examples * units));
    data::BatchIterator batches = dataset.epoch(0);
    while (std::optional<data::Batch> batch = batches.next()) {
      const std::vector<float> values = model.predict_step(batch->features).to_vector<float>();
      out.insert(out.end(), values.begin(), values.end());
    }
  }
  return to_numpy(std::move(out), {examples, units});
}

nb::object host_to_numpy(const train::HostTensor& host) {
  const std::size_t count = host.bytes.size() / size_of(host.dtype);
  if (host.dtype == DType::f32) {
    std::vector<float> values(count);
    std::memcpy(values.data(), host.bytes.data(), host.bytes.size());
    return to_numpy(std::move(values), host.dims);
  }
  if (host.dtype == DType::i64) {
    std::vector<std::int64_t> values(count);
    std::memcpy(values.data(), host.bytes.data(), host.bytes.size());
    return to_numpy(std::move(values), host.dims);
  }
  TP_THROW(InvalidArgument, "keras", "a variable of dtype ", host.dtype, " has no numpy form here");
}

// (name, numpy copy) of replica 0's variables: parameters, optimizer slots, loss-scale state.
nb::list variables(train::Sequential& model) {
  std::vector<std::pair<std::string, train::HostTensor>> hosts;
  {
    nb::gil_scoped_release release;
    for (const auto& [name, tensor] : model.variables()) hosts.emplace_back(name, train::to_host(tensor));
  }
  nb::list out;
  for (const auto& [name, host] : hosts) out.append(nb::make_tuple(name, host_to_numpy(host)));
  return out;
}

// Assigns every replica's variables from (name, float32 or int64 numpy array) pairs naming every variable,
// as variables() lists them (Sequential::assign_variables checks the names).
void assign_variables(train::Sequential& model, const std::vector<std::pair<std::string, HostArray>>& values) {
  device::Device& host = model.session().options().devices->device("cpu:0");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, array] : values) {
    const DType dtype = array.dtype() == nb::dtype<float>()          ? DType::f32
                        : array.dtype() == nb::dtype<std::int64_t>() ? DType::i64
                                                                     : DType::u8;
    if (dtype == DType::u8) TP_THROW(InvalidArgument, "keras", "variable '", name, "': give float32 (or int64) values");
    std::vector<std::int64_t> dims;
    for (std::size_t axis = 0; axis < array.ndim(); ++axis)
      dims.push_back(static_cast<std::int64_t>(array.shape(axis)));
    tensors.emplace_back(name, Tensor::from_host(array.data(), Shape(dims), dtype, host));
  }
  nb::gil_scoped_release release;
  model.assign_variables(tensors);
}

// The variables as one atomic checkpoint in `directory` (the format fit's checkpoints use), with `metadata`.
// In a multi-worker job every worker must call it (gathering ZeRO shards is collective); rank 0 alone writes,
// as fit's checkpoints, and the others return "".
std::string save_weights(train::Sequential& model, const std::string& directory, std::int64_t step,
                         const std::map<std::string, std::string>& metadata) {
  nb::gil_scoped_release release;
  train::CheckpointState state{.step = step, .metadata = metadata};
  for (const auto& [name, tensor] : model.variables()) state.tensors[name] = train::to_host(tensor);
  if (model.distribution().rank() != 0) return {};
  return train::save_checkpoint(directory, state, {.keep = 1}).string();
}

// Restores the newest valid checkpoint in `directory` (ours, or one fit wrote); returns its metadata and step.
nb::tuple load_weights(train::Sequential& model, const std::string& directory) {
  std::optional<train::CheckpointState> state;
  {
    nb::gil_scoped_release release;
    state = train::load_latest_checkpoint(directory);
    if (!state) {
      TP_THROW(InvalidArgument, "keras", "load_weights: no checkpoint in ", directory,
               "; give a directory model.save() or a checkpoint callback wrote");
    }
    train::restore_checkpoint(model, *state, model.session().options().devices->device("cpu:0"), directory);
  }
  return nb::make_tuple(state->metadata, state->step);
}

void add_dense(train::Sequential& model, std::int64_t units, const std::string& activation, bool use_bias,
               const std::string& name, const std::optional<std::string>& policy) {
  if (units < 1) TP_THROW(InvalidArgument, "keras", "Dense: units ", units, " must be >= 1");
  train::Dense layer{
      .units = units, .activation = train::parse_activation(activation), .use_bias = use_bias, .name = name};
  if (policy) layer.policy = train::DTypePolicy::from_name(*policy, "Dense dtype");
  model.add(std::move(layer));
}

}  // namespace

void bind_train(nb::module_& module) {
  nb::class_<train::Sequential>(module, "Sequential", "tp::train::Sequential: Dense layers, compiled into a session")
      .def(nb::init<std::vector<std::int64_t>>(), nb::arg("input_shape"))
      .def("add_dense", &add_dense, nb::arg("units"), nb::arg("activation"), nb::arg("use_bias"), nb::arg("name"),
           nb::arg("policy").none())
      .def("compile", &compile, nb::arg("optimizer"), nb::arg("learning_rate"), nb::arg("beta_1"), nb::arg("beta_2"),
           nb::arg("epsilon"), nb::arg("momentum"), nb::arg("nesterov"), nb::arg("loss"), nb::arg("from_logits"),
           nb::arg("seed"), nb::arg("policy"), nb::arg("strategy").none())
      .def("fit", &fit, nb::arg("train"), nb::arg("epochs"), nb::arg("validation").none(), nb::arg("dispatcher"),
           nb::arg("batch_hooks"), nb::arg("verbose"), nb::arg("checkpoint_dir"), nb::arg("checkpoint_every_steps"),
           nb::arg("steps_in_flight"))
      .def("evaluate", &evaluate, nb::arg("dataset"))
      .def("predict", &predict, nb::arg("features"), nb::arg("batch_size"))
      .def("variables", &variables)
      .def("assign_variables", &assign_variables, nb::arg("values"))
      .def("save_weights", &save_weights, nb::arg("directory"), nb::arg("step"), nb::arg("metadata"))
      .def("load_weights", &load_weights, nb::arg("directory"))
      .def_prop_ro("input_shape", &train::Sequential::input_shape)
      .def_prop_ro("devices", &train::Sequential::devices)
      .def_prop_ro("has_accuracy", &train::Sequential::has_accuracy)
      .def_prop_ro("rank", [](const train::Sequential& model) { return model.distribution().rank(); })
      .def_prop_ro("strategy_name",
                   [](const train::Sequential& model) { return std::string(model.distribution().name()); })
      .def_prop_ro("policy",
                   [](const train::Sequential& model) { return std::string(model.compile_options().policy.name()); });
}

}  // namespace tp::python

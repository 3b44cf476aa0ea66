// SPDX-License-Identifier: Apache-2.0
// tensorpool profile [model flags] [--steps N] [--out DIR] [--synthetic | --data DIR] [--json]: N training
// steps of the Keras-example MLP under the memory profiler. Prints each device's summary table with the
// planned peak next to the measured one and writes snapshot.json, trace.json, trace-DEVICE.csv, report.html and
// summary.txt into DIR. Out of memory: the error says what was being allocated, what was live, why, and the
// batch size that fits (oom_advice.hpp); DIR still gets the files, taken at the failure.
#include <fmt/format.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "commands.hpp"
#include "model_setup.hpp"
#include "output_paths.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/data/dataset.hpp"
#include "tensorpool/data/fashion_mnist.hpp"
#include "tensorpool/profile/exporters.hpp"
#include "tensorpool/report/memory_estimate.hpp"
#include "tensorpool/report/oom_advice.hpp"
#include "tensorpool/report/profile_output.hpp"
#include "tensorpool/train/host_tensor.hpp"
#include "tensorpool/train/parameter_server.hpp"
#include "training_examples.hpp"

namespace tp::cli {
namespace {

struct ProfileArguments {
  ModelArguments model;
  std::int64_t steps = 10;
  std::string out;
  std::string data = data::default_data_directory().string();
  bool synthetic = false;
  bool json = false;
  std::size_t max_events = std::size_t{1} << 16;
};

// Batches of the run: real Fashion-MNIST ones, or random ones (a step's memory does not depend on values).
class Batches {
 public:
  Batches(const ProfileArguments& arguments, device::Device& host) : batch_size_(arguments.model.batch_size) {
    if (arguments.synthetic) {
      std::mt19937 generator(static_cast<std::mt19937::result_type>(arguments.model.seed));
      std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
      std::vector<float> features(static_cast<std::size_t>(batch_size_) * 784);
      std::vector<std::int32_t> labels(static_cast<std::size_t>(batch_size_));
      for (float& value : features) value = pixel(generator);
      for (std::size_t index = 0; index < labels.size(); ++index) labels[index] = static_cast<std::int32_t>(index % 10);
      features_ = staged(host, DType::f32, {batch_size_, 784}, features, "features");
      labels_ = staged(host, DType::i32, {batch_size_}, labels, "labels");
      return;
    }
    data::FashionMnist mnist = data::load_fashion_mnist(arguments.data);
    // Whole batches only (drop_remainder): a batch larger than the training set would leave none.
    check_batch_fits_examples(batch_size_, mnist.train_labels.dims.at(0), false, "profile");
    dataset_ = std::make_unique<data::Dataset>(
        data::Dataset::from_arrays(std::move(mnist.train_images), std::move(mnist.train_labels))
            .normalize()
            .shuffle(arguments.model.seed)
            .batch(batch_size_, true)
            .stage_on(host));
  }

  std::pair<Tensor, Tensor> next() {
    if (!dataset_) return {features_, labels_};
    std::optional<data::Batch> batch = iterator_ ? iterator_->next() : std::nullopt;
    if (!batch) {
      iterator_ = std::make_unique<data::BatchIterator>(dataset_->epoch(epoch_++));
      batch = iterator_->next();
    }
    return {batch->features, batch->labels};
  }

 private:
  // `values` in host-visible memory of `host` (a device with shared memory: there, as Dataset::stage_on puts
  // real batches, outside the device memory the profile measures).
  template <typename T>
  static Tensor staged(device::Device& host, DType dtype, const std::vector<std::int64_t>& dims,
                       const std::vector<T>& values, const char* name) {
    if (host.host_accessible()) return train::to_device(host_tensor(dtype, dims, values), host, {.name = name});
    const std::size_t bytes = values.size() * sizeof(T);
    Tensor tensor = Tensor::from_buffer(
        host.allocate_shared(bytes, {.name = name, .kind = memory::AllocationKind::staging}), 0, Shape(dims), dtype);
    std::memcpy(tensor.data(), values.data(), bytes);
    return tensor;
  }

  template <typename T>
  static train::HostTensor host_tensor(DType dtype, std::vector<std::int64_t> dims, const std::vector<T>& values) {
    train::HostTensor host{.dtype = dtype, .dims = std::move(dims), .bytes = {}};
    host.bytes.resize(values.size() * sizeof(T));
    std::memcpy(host.bytes.data(), values.data(), host.bytes.size());
    return host;
  }

  std::int64_t batch_size_;
  Tensor features_, labels_;
  std::unique_ptr<data::Dataset> dataset_;
  std::unique_ptr<data::BatchIterator> iterator_;
  std::int64_t epoch_ = 0;
};

// The parameter-server strategy trains through its own loop (workers pulling and pushing), so its steps come
// from a dataset of `steps` whole batches, which the workers share.
data::Dataset parameter_server_batches(const ProfileArguments& arguments, device::Device& host) {
  const std::int64_t examples = arguments.steps * arguments.model.batch_size;
  data::IdxArray features, labels;
  if (arguments.synthetic) {
    std::mt19937 generator(static_cast<std::mt19937::result_type>(arguments.model.seed));
    std::uniform_int_distribution<int> pixel(0, 255);
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(examples) * 784);
    std::vector<std::uint8_t> classes(static_cast<std::size_t>(examples));
    for (std::uint8_t& value : pixels) value = static_cast<std::uint8_t>(pixel(generator));
    for (std::size_t index = 0; index < classes.size(); ++index) classes[index] = static_cast<std::uint8_t>(index % 10);
    features = data::IdxArray::of<std::uint8_t>({examples, 784}, pixels);
    labels = data::IdxArray::of<std::uint8_t>({examples}, classes);
  } else {
    data::FashionMnist mnist = data::load_fashion_mnist(arguments.data);
    const std::int64_t available = mnist.train_labels.dims.at(0);
    if (examples > available) {
      TP_THROW(InvalidArgument, "profile", "--steps ", arguments.steps, " at --batch-size ", arguments.model.batch_size,
               " needs ", examples, " examples; Fashion-MNIST has ", available,
               " (the parameter-server strategy profiles one pass): fewer steps, or --synthetic");
    }
    features = std::move(mnist.train_images);
    labels = std::move(mnist.train_labels);
    features.dims.at(0) = examples;
    features.bytes.resize(static_cast<std::size_t>(examples) * 784);
    labels.dims.at(0) = examples;
    labels.bytes.resize(static_cast<std::size_t>(examples));
  }
  return data::Dataset::from_arrays(std::move(features), std::move(labels))
      .normalize()
      .shuffle(arguments.model.seed)
      .batch(arguments.model.batch_size, true)
      .stage_on(host);
}

void run_profile(const ProfileArguments& arguments) {
  if (arguments.steps <= 0) TP_THROW(InvalidArgument, "profile", "--steps must be positive");
  check_writable_directory(arguments.out, "--out", "profile");  // before the steps, not after them
  const ModelSetup setup = configure_model_devices(arguments.model, "profile");
  // The parameter-server strategy keeps its variables on --ps-device, beside the workers' devices.
  const std::vector<std::string> names = setup.used_devices();
  const std::vector<device::Device*> run_devices = report::named_devices(*setup.manager, names);
  std::unique_ptr<profile::MemoryProfiler> profiler =
      report::start_profiler(*setup.manager, names, true, arguments.max_events);
  std::unique_ptr<train::Sequential> model = build_mlp(arguments.model, setup);
  const bool own_loop = setup.distribution->runs_own_loop();
  // Batches live where `train` assembles them (ModelSetup::batch_device), so the profile measures its steps.
  device::Device& batches_on = setup.batch_device();
  const runtime::MemoryPlan plan = setup.distribution->plan(*model, arguments.model.batch_size, {});
  report::set_planned_peaks(*profiler, plan);
  const report::MemoryEstimate estimate =
      report::estimate_memory(plan, *model, run_devices, arguments.model.batch_size);
  try {
    if (own_loop) {  // the parameter server's asynchronous workers
      train::fit_parameter_server(*model, parameter_server_batches(arguments, setup.manager->device("cpu:0")),
                                  {.fit = {.epochs = 1}});
    } else {
      Batches batches(arguments, batches_on);
      for (std::int64_t step = 1; step <= arguments.steps; ++step) {
        const auto [features, labels] = batches.next();
        model->train_step(features, labels, step);
      }
    }
  } catch (OutOfMemoryError& error) {
    if (!arguments.out.empty()) {  // the files, taken at the failure; a write error must not hide the OOM
      try {
        const std::string& device = error.report().device;
        report::write_profile(arguments.out,
                              profiler->snapshot(device.empty() ? "out of memory" : "out of memory on " + device));
      } catch (const std::exception& writing) {
        std::cerr << "tensorpool: the profile was not written: " << writing.what() << '\n';
      }
    }
    report::add_oom_advice(error, *model, run_devices, arguments.model.batch_size, batches_on.name());
    throw;
  }
  const profile::MemorySnapshot snapshot = profiler->snapshot("after " + std::to_string(arguments.steps) + " steps");
  std::string summary;
  if (!arguments.out.empty()) {
    summary = report::write_profile(arguments.out, snapshot);
  } else {
    for (const profile::DeviceSnapshot& device : snapshot.devices) summary += profile::summary_table(device);
  }
  nlohmann::json devices = nlohmann::json::array();
  for (const report::DeviceEstimate& planned : estimate.devices) {
    for (const profile::DeviceSnapshot& device : snapshot.devices) {
      if (device.device != planned.device) continue;
      devices.push_back({{"device", device.device},
                         {"planned_peak_bytes", planned.planned_peak_bytes},
                         {"planned_peak_allocated_bytes", planned.planned_peak_allocated_bytes},
                         {"measured_peak_requested_bytes", device.stats.peak_bytes_requested},
                         {"measured_peak_in_use_bytes", device.stats.peak_bytes_in_use},
                         {"recorded_peak_in_use_bytes", device.peak.in_use_bytes}});
    }
  }
  if (arguments.json) {
    std::cout << nlohmann::json{{"steps", arguments.steps},
                                {"batch_size", arguments.model.batch_size},
                                {"out", arguments.out},
                                {"devices", devices}}
                     .dump(2)
              << '\n';
    return;
  }
  std::cout << fmt::format("Profiled {} training steps at batch {} on {}\n", arguments.steps,
                           arguments.model.batch_size, arguments.model.devices);
  for (const nlohmann::json& device : devices) {
    const auto planned = device.at("planned_peak_bytes").get<std::size_t>();
    const auto measured = device.at("measured_peak_requested_bytes").get<std::size_t>();
    std::cout << fmt::format("  {}: planned peak {}, measured peak {} ({}), in use after rounding {}\n",
                             device.at("device").get<std::string>(), format_bytes(planned), format_bytes(measured),
                             planned == measured ? "equal" : "differs",
                             format_bytes(device.at("measured_peak_in_use_bytes").get<std::size_t>()));
  }
  std::cout << '\n' << summary;
  if (!arguments.out.empty()) {
    std::cout << fmt::format(
        "\nWrote snapshot.json, trace.json, trace-DEVICE.csv (one per device), report.html and summary.txt to {}\n",
        arguments.out);
  }
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto arguments = std::make_shared<ProfileArguments>();
  CLI::App* command = app.add_subcommand("profile", "training steps under the memory profiler, with its reports");
  add_model_options(*command, arguments->model);
  command->add_option("--steps", arguments->steps, "training steps to run")->capture_default_str();
  command->add_option("--out", arguments->out,
                      "directory for snapshot.json, trace.json, trace-DEVICE.csv, report.html, summary.txt");
  command->add_option("--data", arguments->data, "directory of the Fashion-MNIST IDX files")->capture_default_str();
  command->add_flag("--synthetic", arguments->synthetic, "random batches instead of Fashion-MNIST (same memory)");
  command->add_option("--max-events", arguments->max_events, "events kept per device (older ones are dropped)")
      ->capture_default_str();
  command->add_flag("--json", arguments->json, "print the planned and measured peaks as JSON");
  command->callback([arguments] { run_profile(*arguments); });
}

}  // namespace tp::cli

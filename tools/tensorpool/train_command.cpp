// tensorpool train: the main job. Defaults reproduce the Keras example (Fashion-MNIST, Dense 512 relu,
// Dense 10 softmax, Adam, sparse categorical cross-entropy, accuracy, 5 epochs, batch 32) on two sim devices
// with the mirrored strategy, and end with a per-device memory summary.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/data/dataset.hpp"
#include "tensorpool/data/fashion_mnist.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"
#include "tensorpool/train/fit.hpp"
#include "tensorpool/train/history_logger.hpp"
#include "tensorpool/train/progress_bar.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::cli {
namespace {

struct TrainArguments {
  std::string devices = "sim:0,sim:1";
  std::string strategy = "mirrored";
  std::int64_t epochs = 5;
  std::int64_t batch_size = 32;
  std::string data = data::default_data_directory().string();
  std::string allocator = "bfc";
  bool allow_growth = true;
  std::string sim_memory = "1GiB";
  std::string checkpoint_dir;
  std::string summary_json;
  std::string history_csv;
  std::string all_reduce = "ring";
  std::uint64_t seed = 42;
  int intra_op_threads = 0;  // 0: the cores divided between the devices (at least 1 each)
  std::int64_t limit_train = 0;
};

std::vector<std::string> split_devices(const std::string& text) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    names.push_back(text.substr(start, comma - start));
    if (names.back().empty()) TP_THROW(InvalidArgument, "train", "--devices '", text, "' has an empty entry");
    start = comma + 1;
  }
  return names;
}

// Creates the sim devices the run names (unless TP_SIM_DEVICES configures them) with the run's memory config.
device::DeviceManager& configure_devices(const TrainArguments& arguments, const std::vector<std::string>& names) {
  device::DeviceManager& manager = device::DeviceManager::instance();
  int sims = 0;
  for (const std::string& name : names) {
    const device::DeviceId id = device::parse_device_id(name, "--devices entry");
    if (id.kind == device::DeviceKind::sim) sims = std::max(sims, id.index + 1);
  }
  if (std::getenv("TP_SIM_DEVICES") == nullptr && sims > 0) {
    manager.set_sim_devices(sims, parse_bytes(arguments.sim_memory, "--sim-memory"));
  }
  memory::MemoryConfig config = device::DeviceManagerOptions::default_device_memory_config();
  config.policy = arguments.allow_growth ? memory::GrowthPolicy::grow : memory::GrowthPolicy::preallocate;
  if (arguments.allocator == "bfc") {
    config.allocator = memory::AllocatorKind::bfc;
  } else if (arguments.allocator == "expandable") {
    config.allocator = memory::AllocatorKind::expandable;
  } else if (arguments.allocator == "system") {
    config.allocator = memory::AllocatorKind::system;
  } else {
    TP_THROW(InvalidArgument, "train", "--allocator '", arguments.allocator, "' is not bfc, expandable or system");
  }
  for (const std::string& name : names) {
    const device::DeviceId id = device::parse_device_id(name, "--devices entry");
    if (id.kind != device::DeviceKind::cpu) manager.set_memory_config(id, config);
  }
  return manager;
}

struct LargestTensor {
  std::string name, shape, kind;
  std::size_t bytes = 0;
};

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string text = "[";
  for (std::size_t index = 0; index < dims.size(); ++index) text += (index ? "," : "") + std::to_string(dims[index]);
  return text + "]";
}

nlohmann::json memory_summary(device::DeviceManager& manager, const std::vector<std::string>& names,
                              const runtime::MemoryPlan& plan) {
  nlohmann::json devices = nlohmann::json::array();
  std::cout << "\nMemory summary\n";
  for (const std::string& name : names) {
    device::Device& device = manager.device(name);
    const memory::MemoryStats stats = device.memory().stats();
    std::size_t planned_peak = 0;
    for (const runtime::DevicePlan& device_plan : plan.devices) {
      if (device_plan.device == name) planned_peak = device_plan.planned_peak_bytes;
    }
    std::vector<LargestTensor> largest;
    if (memory::TrackingAdaptor* tracking = device.memory().tracking()) {
      for (const memory::TrackedAllocation& live : tracking->live_allocations()) {
        const bool arena = live.tag.dtype.empty();  // the step's arena: the planned tensors live inside it
        largest.push_back({live.tag.name, arena ? "" : live.tag.dtype + shape_text(live.tag.shape),
                           arena ? "the step's planned arena" : std::string(memory::to_string(live.tag.kind)),
                           live.bytes});
      }
    }
    for (const runtime::PlannedTensor& tensor : plan.tensors) {
      if (tensor.device == name && tensor.planned_bytes > 0) {
        largest.push_back(
            {tensor.name, tensor.dtype + shape_text(tensor.shape), "activation (in arena)", tensor.bytes});
      }
    }
    std::sort(largest.begin(), largest.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
    largest.resize(std::min<std::size_t>(largest.size(), 6));
    std::cout << fmt::format("  {}: peak in use {}, reserved {} (peak {}), planned peak {}, fragmentation {:.1f}%\n",
                             name, format_bytes(stats.peak_bytes_in_use), format_bytes(stats.bytes_reserved),
                             format_bytes(stats.peak_bytes_reserved), format_bytes(planned_peak),
                             100.0 * stats.fragmentation());
    nlohmann::json tensors = nlohmann::json::array();
    for (const LargestTensor& tensor : largest) {
      std::cout << fmt::format("    {:>10}  {} {} ({})\n", format_bytes(tensor.bytes), tensor.name, tensor.shape,
                               tensor.kind);
      tensors.push_back(
          {{"name", tensor.name}, {"shape", tensor.shape}, {"kind", tensor.kind}, {"bytes", tensor.bytes}});
    }
    devices.push_back({{"device", name},
                       {"peak_in_use_bytes", stats.peak_bytes_in_use},
                       {"reserved_bytes", stats.bytes_reserved},
                       {"peak_reserved_bytes", stats.peak_bytes_reserved},
                       {"planned_peak_bytes", planned_peak},
                       {"fragmentation", stats.fragmentation()},
                       {"largest_tensors", tensors}});
  }
  return devices;
}

// BLAS threads: as given, or the machine's cores shared between the devices' streams, so that replicas running
// at once do not oversubscribe the cores.
int intra_op_threads(const TrainArguments& arguments, std::size_t devices) {
  if (arguments.intra_op_threads < 0) TP_THROW(InvalidArgument, "train", "--intra-op-threads must be >= 0");
  if (arguments.intra_op_threads > 0) return arguments.intra_op_threads;
  const auto cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / static_cast<int>(std::max<std::size_t>(1, devices)));
}

void run_train(const TrainArguments& arguments) {
  const std::vector<std::string> names = split_devices(arguments.devices);
  train::Strategy strategy;
  if (arguments.strategy == "one") {
    if (names.size() != 1)
      TP_THROW(InvalidArgument, "train", "--strategy one takes one device; --devices has ", names.size());
    strategy = train::Strategy::one_device(names[0]);
  } else if (arguments.strategy == "mirrored") {
    strategy = train::Strategy::mirrored(names, arguments.all_reduce);
  } else {
    TP_THROW(InvalidArgument, "train", "--strategy '", arguments.strategy, "' is not one or mirrored");
  }
  if (arguments.batch_size <= 0) TP_THROW(InvalidArgument, "train", "--batch-size must be positive");
  device::DeviceManager& manager = configure_devices(arguments, names);

  const auto load_start = std::chrono::steady_clock::now();
  data::FashionMnist mnist = data::load_fashion_mnist(arguments.data);
  device::Device& cpu = manager.device("cpu:0");
  data::Dataset train = data::Dataset::from_arrays(std::move(mnist.train_images), std::move(mnist.train_labels));
  if (arguments.limit_train > 0)
    train = train.shard(std::max<std::int64_t>(1, train.size() / arguments.limit_train), 0);
  train = train.normalize().shuffle(arguments.seed).batch(arguments.batch_size).prefetch(2).stage_on(cpu);
  const data::Dataset test = data::Dataset::from_arrays(std::move(mnist.test_images), std::move(mnist.test_labels))
                                 .normalize()
                                 .batch(arguments.batch_size)
                                 .prefetch(2)
                                 .stage_on(cpu);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();

  train::Sequential model({784}, {{.units = 512, .activation = train::Activation::relu},
                                  {.units = 10, .activation = train::Activation::softmax}});
  model.compile(
      {.optimizer = train::Adam{}, .loss = train::Loss::sparse_categorical_crossentropy, .seed = arguments.seed},
      strategy, {.name = "train", .intra_op_threads = intra_op_threads(arguments, names.size())});
  const runtime::MemoryPlan plan = model.plan(arguments.batch_size);
  std::cout << fmt::format(
      "Fashion-MNIST: {} training and {} test examples ({:.1f} s to load), batch {}, {} "
      "strategy on {}\n",
      train.size(), test.size(), load_seconds, arguments.batch_size, arguments.strategy, arguments.devices);
  for (const runtime::DevicePlan& device_plan : plan.devices) {
    std::cout << fmt::format("  planned peak on {}: {} (variables {}, step arena {}, lower bound {})\n",
                             device_plan.device, format_bytes(device_plan.planned_peak_bytes),
                             format_bytes(device_plan.variable_bytes), format_bytes(device_plan.arena_bytes),
                             format_bytes(device_plan.lower_bound_bytes));
  }
  train::FitOptions options{
      .epochs = arguments.epochs, .validation = &test, .checkpoint_dir = arguments.checkpoint_dir};
  options.callbacks.push_back(std::make_shared<train::ProgressBar>(std::cout, train::stdout_is_terminal()));
  if (!arguments.history_csv.empty())
    options.callbacks.push_back(std::make_shared<train::CsvLogger>(arguments.history_csv));
  const train::FitResult result = train::fit(model, train, options);
  const train::Evaluation evaluation = train::evaluate(model, test);
  const double samples_per_second =
      result.train_seconds > 0 ? static_cast<double>(result.train_samples) / result.train_seconds : 0.0;
  std::cout << fmt::format("\nTest accuracy {:.4f}, test loss {:.4f}; {:.0f} samples/s over {} steps\n",
                           evaluation.accuracy, evaluation.loss, samples_per_second, result.steps);
  nlohmann::json devices = memory_summary(manager, names, plan);
  if (!arguments.summary_json.empty()) {
    nlohmann::json summary = {
        {"test_accuracy", evaluation.accuracy},
        {"test_loss", evaluation.loss},
        {"final_train_loss", result.history.epochs.empty() ? 0.0 : result.history.epochs.back().loss},
        {"samples_per_second", samples_per_second},
        {"epochs", arguments.epochs},
        {"batch_size", arguments.batch_size},
        {"strategy", arguments.strategy},
        {"steps", result.steps},
        {"resumed_from_step", result.resumed_from_step},
        {"devices", devices}};
    std::ofstream out(arguments.summary_json);
    out << summary.dump(2) << '\n';
    if (!out) TP_THROW(DeviceError, "train", "cannot write --summary-json ", arguments.summary_json);
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto arguments = std::make_shared<TrainArguments>();
  CLI::App* command = app.add_subcommand("train", "train the Keras-example MLP on Fashion-MNIST (the main job)");
  command->add_option("--devices", arguments->devices, "comma-separated devices")->capture_default_str();
  command->add_option("--strategy", arguments->strategy, "one | mirrored")->capture_default_str();
  command->add_option("--epochs", arguments->epochs, "epochs")->capture_default_str()->check(CLI::NonNegativeNumber);
  command->add_option("--batch-size", arguments->batch_size, "global batch size")->capture_default_str();
  command->add_option("--data", arguments->data, "directory of the Fashion-MNIST IDX files")->capture_default_str();
  command->add_option("--allocator", arguments->allocator, "bfc | expandable | system")->capture_default_str();
  command->add_option("--allow-growth", arguments->allow_growth, "grow device memory on demand (true) or preallocate")
      ->capture_default_str();
  command->add_option("--sim-memory", arguments->sim_memory, "memory of each sim device")->capture_default_str();
  command->add_option("--checkpoint-dir", arguments->checkpoint_dir, "save checkpoints there and resume from them");
  command->add_option("--summary-json", arguments->summary_json, "write the run's summary as JSON");
  command->add_option("--history-csv", arguments->history_csv, "write the per-epoch history as CSV");
  command->add_option("--all-reduce", arguments->all_reduce, "ring | reduce_to_one")->capture_default_str();
  command->add_option("--seed", arguments->seed, "initialisation and shuffle seed")->capture_default_str();
  command
      ->add_option("--intra-op-threads", arguments->intra_op_threads,
                   "BLAS threads (per process); 0: the cores divided between the devices")
      ->capture_default_str();
  command->add_option("--limit-train", arguments->limit_train, "train on about this many examples (quick runs)");
  command->callback([arguments] { run_train(*arguments); });
}

}  // namespace tp::cli

// SPDX-License-Identifier: Apache-2.0
// tensorpool train: the main job. Defaults reproduce the Keras example (Fashion-MNIST, Dense 512 relu,
// Dense 10 softmax, Adam, sparse categorical cross-entropy, accuracy, 5 epochs, batch 32) on two sim devices
// with the mirrored strategy, and end with a per-device memory summary.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "model_setup.hpp"
#include "option_checks.hpp"
#include "output_paths.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/data/dataset.hpp"
#include "tensorpool/data/fashion_mnist.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/distribute/parameter_transport.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"
#include "tensorpool/report/memory_summary.hpp"
#include "tensorpool/report/oom_advice.hpp"
#include "tensorpool/report/profile_output.hpp"
#include "tensorpool/train/fit.hpp"
#include "tensorpool/train/history_logger.hpp"
#include "tensorpool/train/parameter_server.hpp"
#include "tensorpool/train/progress_bar.hpp"
#include "tensorpool/train/sequential.hpp"
#include "training_examples.hpp"
#include "worker_launch.hpp"

namespace tp::cli {
namespace {

struct TrainArguments {
  ModelArguments model;  // devices, strategy, batch size, allocator, ..., hidden, precision, seed
  std::int64_t epochs = 5;
  std::string data = data::default_data_directory().string();
  std::string checkpoint_dir;
  std::string summary_json;
  std::string history_csv;
  std::int64_t limit_train = 0;
  std::int64_t steps_in_flight = 2;  // FitOptions::steps_in_flight: the host launches a step ahead
  std::string profile_dir;           // --profile: memory profiler reports written there (docs/profiling.md)
  bool cuda_graph = false;           // FitOptions::cuda_graphs
};

// Prints each epoch's figures and the staleness of the updates; returns them for --summary-json.
nlohmann::json report_parameter_server(const train::ParameterServerResult& result, const train::Strategy& strategy) {
  for (const train::EpochLogs& epoch : result.fit.history.epochs) {
    std::cout << fmt::format(
        "Epoch {}: loss {:.4f}{}{}\n", epoch.epoch + 1, epoch.loss,
        epoch.accuracy ? fmt::format(", accuracy {:.4f}", *epoch.accuracy) : std::string(),
        epoch.val_accuracy ? fmt::format(", val_accuracy {:.4f}", *epoch.val_accuracy) : std::string());
  }
  const train::StalenessStats stats = train::staleness_stats(result.updates);
  std::string steps;
  for (std::int64_t count : result.worker_steps) steps += (steps.empty() ? "" : ", ") + std::to_string(count);
  std::cout << fmt::format(
      "Parameter server: {} updates, staleness mean {:.2f}, p50 {}, p90 {}, p99 {}, max {}; steps per worker [{}]\n",
      result.updates.size(), stats.mean, stats.p50, stats.p90, stats.p99, stats.max, steps);
  return {{"parameter_device", strategy.parameter_device},
          {"max_staleness", strategy.max_staleness ? nlohmann::json(*strategy.max_staleness) : nlohmann::json()},
          {"updates", result.updates.size()},
          {"worker_steps", result.worker_steps},
          {"staleness_mean", stats.mean},
          {"staleness_p50", stats.p50},
          {"staleness_p90", stats.p90},
          {"staleness_p99", stats.p99},
          {"staleness_max", stats.max}};
}

std::string gemm_shape_name(const device::GemmChoice& choice) {
  return fmt::format("{}x{}x{}{}{}", choice.m, choice.n, choice.k, choice.transpose_a ? " A^T" : "",
                     choice.transpose_b ? " B^T" : "");
}

// "GEMM auto: onednn for N of M shape classes (C cached, M measured); one thread, m x n x k: 32x512x784 onednn
// X vs Y GFLOP/s cached, ...": per class, the shape timed, the library chosen, its rate and the other's, and
// whether this run timed it or took it from the machine's cache file (where the run that timed it saved it).
// Only for a run that made choices: one whose devices compute their own GEMMs (opencl) makes none and prints
// no line.
std::string gemm_choices_line(const std::vector<device::GemmChoice>& choices) {
  const auto onednn = std::count_if(choices.begin(), choices.end(),
                                    [](const device::GemmChoice& choice) { return choice.library == "onednn"; });
  const auto cached = std::count_if(choices.begin(), choices.end(),
                                    [](const device::GemmChoice& choice) { return choice.source == "cached"; });
  std::string line = fmt::format("GEMM auto: onednn for {} of {} shape classes ({} cached, {} measured)", onednn,
                                 choices.size(), cached, choices.size() - static_cast<std::size_t>(cached));
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const device::GemmChoice& choice = choices[i];
    const bool chose_onednn = choice.library == "onednn";
    line += fmt::format("{}{} {} {:.1f} vs {:.1f} GFLOP/s {}", i == 0 ? "; one thread, m x n x k: " : ", ",
                        gemm_shape_name(choice), choice.library,
                        chose_onednn ? choice.onednn_gflops : choice.openblas_gflops,
                        chose_onednn ? choice.openblas_gflops : choice.onednn_gflops, choice.source);
  }
  return line + "\n";
}

nlohmann::json gemm_choices_json(const std::vector<device::GemmChoice>& choices) {
  nlohmann::json array = nlohmann::json::array();
  for (const device::GemmChoice& choice : choices) {
    array.push_back({{"m", choice.m},
                     {"n", choice.n},
                     {"k", choice.k},
                     {"transpose_a", choice.transpose_a},
                     {"transpose_b", choice.transpose_b},
                     {"library", choice.library},
                     {"openblas_gflops", choice.openblas_gflops},
                     {"onednn_gflops", choice.onednn_gflops},
                     {"source", choice.source}});
  }
  return array;
}

// "bfloat16 GEMM paths: native for 6, padded for 2, widened for 2 of 10 products (C cached, M measured);
// bfloat16 784x512x16 A^T (float32 via auto) padded measured, ...": how each bfloat16 product of a
// mixed_bfloat16 run is computed (Device::gemm_path_choices).
std::string gemm_path_choices_line(const std::vector<device::GemmPathChoice>& choices) {
  std::map<std::string, std::size_t> by_path;
  std::size_t cached = 0;
  for (const device::GemmPathChoice& choice : choices) {
    ++by_path[choice.path];
    cached += choice.source == "cached" ? 1 : 0;
  }
  std::string counts;
  for (const auto& [path, count] : by_path)
    counts += fmt::format("{}{} for {}", counts.empty() ? "" : ", ", path, count);
  std::string line = fmt::format("bfloat16 GEMM paths: {} of {} products ({} cached, {} measured)", counts,
                                 choices.size(), cached, choices.size() - cached);
  for (std::size_t i = 0; i < choices.size(); ++i) {
    line += fmt::format("{}{} {} {}", i == 0 ? "; " : ", ", choices[i].product, choices[i].path, choices[i].source);
  }
  return line + "\n";
}

nlohmann::json gemm_path_choices_json(const std::vector<device::GemmPathChoice>& choices) {
  nlohmann::json array = nlohmann::json::array();
  for (const device::GemmPathChoice& choice : choices) {
    array.push_back({{"product", choice.product}, {"path", choice.path}, {"source", choice.source}});
  }
  return array;
}

void run_train(const TrainArguments& arguments) {
  const ModelArguments& flags = arguments.model;
  // Line-buffered even into a pipe or a file (where stdout is fully buffered by default): a log shows each
  // line as it is printed, and a run killed early leaves everything it printed.
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  // Every output checked before any work: a path that cannot be written must not cost a training run.
  validate_limit_train(arguments.limit_train);
  check_writable_file(arguments.summary_json, "--summary-json", "train");
  check_writable_file(arguments.history_csv, "--history-csv", "train");
  check_writable_directory(arguments.checkpoint_dir, "--checkpoint-dir", "train");
  check_writable_directory(arguments.profile_dir, "--profile", "train");
  const ModelSetup setup = configure_model_devices(flags, "train");
  const std::vector<std::string> names = setup.used_devices();
  const train::Strategy& strategy = setup.strategy;
  const train::DTypePolicy policy = train::DTypePolicy::from_name(flags.precision, "--precision");
  const train::DistributionStrategy& distribution = *setup.distribution;
  const std::string gemm = gemm_setting(flags);  // --gemm, else TP_GEMM, else auto
  // A multi-worker job: rank 0 reports, writes checkpoints and the summary; the others train silently.
  const bool multi_worker = distribution.replicates_across_processes();
  // Parameter server: in-process workers, or under mpirun rank 0 serves and ranks 1.. work.
  const bool parameter_server = distribution.runs_own_loop();
  const bool across_processes = distribution.spans_processes();
  check_launch(flags, distribution);
  if (across_processes) {  // before the first collective: ranks with other flags would run another program
    std::vector<distribute::JobSetting> settings = shared_model_settings(flags, distribution);
    settings.push_back({.name = "--epochs", .value = std::to_string(arguments.epochs), .shown = {}});
    settings.push_back({.name = "--limit-train", .value = std::to_string(arguments.limit_train), .shown = {}});
    require_same_flags(settings);
  }
  const int rank = across_processes ? distribute::mpi_world().rank : 0;
  const int workers = across_processes ? distribute::mpi_world().size : 1;
  std::streambuf* const console = std::cout.rdbuf();
  if (rank != 0) std::cout.rdbuf(nullptr);
  struct RestoreConsole {
    std::streambuf* buffer;
    ~RestoreConsole() { std::cout.rdbuf(buffer); }
  } restore_console{console};
  device::DeviceManager& manager = *setup.manager;
  std::unique_ptr<profile::MemoryProfiler> profiler =
      report::start_profiler(manager, names, !arguments.profile_dir.empty());

  const auto load_start = std::chrono::steady_clock::now();
  // The libraries' lazy set-up (oneDNN's kernel generation) runs here while another thread reads the dataset,
  // rather than inside the first training step. The future's destructor waits for the reading on every path.
  std::future<data::FashionMnist> loading =
      std::async(std::launch::async, [&arguments] { return data::load_fashion_mnist(arguments.data); });
  for (device::Device* device : report::named_devices(manager, names)) device->warm_up_kernels();
  data::FashionMnist mnist = loading.get();
  limit_training_examples(mnist, arguments.limit_train, arguments.data);
  data::Dataset train = data::Dataset::from_arrays(std::move(mnist.train_images), std::move(mnist.train_labels));
  check_batch_fits_examples(flags.batch_size, train.size(), arguments.limit_train > 0, "train");
  // One device with shared memory (opencl with fine-grained SVM): batches are assembled in it, so a step's
  // kernels read the fed batch in place instead of a host-staged copy; the same values either way.
  device::Device& staging = setup.batch_device();
  train = train.normalize().shuffle(flags.seed).batch(flags.batch_size).prefetch(2).stage_on(staging);
  const data::Dataset test = data::Dataset::from_arrays(std::move(mnist.test_images), std::move(mnist.test_labels))
                                 .normalize()
                                 .batch(flags.batch_size)
                                 .prefetch(2)
                                 .stage_on(staging);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();

  const std::unique_ptr<train::Sequential> compiled = build_mlp(flags, setup);
  train::Sequential& model = *compiled;
  // The parameter-server strategy: the variables on the parameter device, each worker's step on its device.
  // The plan knows where the batches live: fed in place there, they take no slot in the arena.
  const runtime::MemoryPlan plan = distribution.plan(model, flags.batch_size, staging.name());
  if (profiler) report::set_planned_peaks(*profiler, plan);
  const std::string sharded =
      model.shard() == train::Shard::none
          ? std::string()
          : fmt::format(", shard {}{}", train::name_of(model.shard()), flags.shard == "auto" ? " (auto)" : "");
  std::cout << fmt::format(
      "Fashion-MNIST: {} training and {} test examples ({:.1f} s to load), batch {}, {} "
      "strategy on {}{}{}, precision {}, gemm {}\n",
      train.size(), test.size(), load_seconds, flags.batch_size, flags.strategy,
      multi_worker ? fmt::format("{} workers x ", workers) : std::string(), flags.devices, sharded, policy.name(),
      gemm);
  std::cout << distribution.header_line(across_processes, workers);
  for (const runtime::DevicePlan& device_plan : plan.devices) {
    std::cout << fmt::format("  planned peak on {}: {} (variables {}, step arena {}, lower bound {})\n",
                             device_plan.device, format_bytes(device_plan.planned_peak_bytes),
                             format_bytes(device_plan.variable_bytes), format_bytes(device_plan.arena_bytes),
                             format_bytes(device_plan.lower_bound_bytes));
  }
  train::FitOptions options{.epochs = arguments.epochs,
                            .validation = &test,
                            .checkpoint_dir = arguments.checkpoint_dir,
                            .write_checkpoints = rank == 0,
                            .steps_in_flight = arguments.steps_in_flight,
                            .cuda_graphs = arguments.cuda_graph};
  if (rank == 0 && !parameter_server)
    options.callbacks.push_back(std::make_shared<train::ProgressBar>(std::cout, train::stdout_is_terminal()));
  if (!arguments.history_csv.empty() && rank == 0)
    options.callbacks.push_back(std::make_shared<train::CsvLogger>(
        arguments.history_csv,
        // Resuming from --checkpoint-dir keeps the epochs before the resumed one; a fresh run starts the file.
        train::CsvLoggerOptions{.append = !arguments.checkpoint_dir.empty()}));
  train::ParameterServerResult ps_result;
  const train::FitResult result = [&] {
    try {
      if (parameter_server) {
        ps_result = train::fit_parameter_server(model, train, {.fit = options});
        return ps_result.fit;
      }
      return train::fit(model, train, options);
    } catch (OutOfMemoryError& error) {  // say which batch size fits, by the static plan
      if (profiler && !arguments.profile_dir.empty() && rank == 0)
        report::write_profile_at_oom(arguments.profile_dir, *profiler, error.report().device);
      report::add_oom_advice(error, model, report::named_devices(manager, names), flags.batch_size, staging.name());
      throw;
    }
  }();
  // A parameter-server worker rank holds no trained variables: rank 0 evaluates.
  const train::Evaluation evaluation =
      parameter_server && rank != 0 ? train::Evaluation{} : train::evaluate(model, test);
  nlohmann::json ps_summary;
  if (parameter_server && rank == 0) ps_summary = report_parameter_server(ps_result, strategy);
  const double samples_per_second =
      result.train_seconds > 0 ? static_cast<double>(result.train_samples) / result.train_seconds : 0.0;
  // The speed of the steps trained now; a rerun of a finished job trains none and says why instead.
  std::string speed =
      fmt::format("{:.0f} samples/s over {} steps", samples_per_second, result.steps - result.resumed_from_step);
  if (result.resumed_from_step > 0) speed += fmt::format(" (resumed at step {})", result.resumed_from_step);
  if (result.train_samples == 0 && result.first_epoch >= arguments.epochs) {
    speed = result.resumed_from_step > 0
                ? fmt::format(
                      "nothing to train: the checkpoint in {} is at epoch {} of {} (step {}); raise --epochs "
                      "to train on, or give another --checkpoint-dir to start afresh",
                      arguments.checkpoint_dir, result.first_epoch, arguments.epochs, result.resumed_from_step)
                : fmt::format("nothing to train with --epochs {}", arguments.epochs);
  }
  std::cout << fmt::format("\nTest accuracy {:.4f}, test loss {:.4f}; {}\n", evaluation.accuracy, evaluation.loss,
                           speed);
  if (const std::optional<train::LossScaleState> scale = model.loss_scale_state()) {
    std::cout << fmt::format("Loss scale {:g} ({} steps skipped on overflow)\n", scale->scale, scale->skipped_steps);
  }
  // The CPU kernels' "auto" choices are process-wide: cpu:0 reports them for every cpu and sim device.
  const std::vector<device::GemmChoice> gemm_choices = manager.device("cpu:0").gemm_choices();
  if (gemm == "auto" && !gemm_choices.empty()) std::cout << gemm_choices_line(gemm_choices);
  const std::vector<device::GemmPathChoice> gemm_paths = manager.device("cpu:0").gemm_path_choices();
  if (!gemm_paths.empty()) std::cout << gemm_path_choices_line(gemm_paths);
  const std::vector<report::DeviceSummary> memory_report = report::memory_summary(manager, names, plan, model);
  std::cout << report::summary_text(memory_report);
  nlohmann::json devices = report::to_json(memory_report);
  if (profiler && !arguments.profile_dir.empty() && rank == 0) {
    report::write_profile(arguments.profile_dir, profiler->snapshot("end of training"));
    std::cout << "Memory profile written to " << arguments.profile_dir << " (report.html, snapshot.json, trace.json)\n";
  }
  if (!arguments.summary_json.empty() && rank == 0) {
    nlohmann::json summary = {
        {"workers", workers},
        {"test_accuracy", evaluation.accuracy},
        {"test_loss", evaluation.loss},
        {"final_train_loss", result.history.epochs.empty() ? 0.0 : result.history.epochs.back().loss},
        {"samples_per_second", samples_per_second},
        {"epochs", arguments.epochs},
        {"batch_size", flags.batch_size},
        {"strategy", flags.strategy},
        {"shard", std::string(train::name_of(model.shard()))},  // --shard auto settled
        {"precision", std::string(policy.name())},
        {"gemm", gemm},
        {"gemm_choices", gemm_choices_json(gemm_choices)},
        {"gemm_path_choices", gemm_path_choices_json(gemm_paths)},
        {"steps", result.steps},
        {"resumed_from_step", result.resumed_from_step},
        {"devices", devices}};
    if (parameter_server) summary["parameter_server"] = ps_summary;
    std::ofstream out(arguments.summary_json);
    out << summary.dump(2) << '\n';
    if (!out) TP_THROW(DeviceError, "train", "cannot write --summary-json ", arguments.summary_json);
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto arguments = std::make_shared<TrainArguments>();
  CLI::App* command = app.add_subcommand("train", "train the Keras-example MLP on Fashion-MNIST (the main job)");
  add_model_options(*command, arguments->model);
  command->add_option("--epochs", arguments->epochs, "epochs")
      ->capture_default_str()
      ->check(whole_number<std::int64_t>(0));
  command->add_option("--data", arguments->data, "directory of the Fashion-MNIST IDX files")->capture_default_str();
  command->add_option("--checkpoint-dir", arguments->checkpoint_dir, "save checkpoints there and resume from them");
  command->add_option("--summary-json", arguments->summary_json, "write the run's summary as JSON");
  command->add_option("--history-csv", arguments->history_csv,
                      "write the per-epoch history as CSV (with --checkpoint-dir, a resumed run appends to it)");
  command
      ->add_option("--limit-train", arguments->limit_train,
                   "train on the first N training examples (quick runs); 0: all of them")
      ->capture_default_str();
  command
      ->add_option("--steps-in-flight", arguments->steps_in_flight,
                   "training steps launched ahead of the one whose loss is read (1: wait for each step before "
                   "launching the next; 2: the devices never wait for the host between steps)")
      ->capture_default_str()
      ->check(whole_number<std::int64_t>(1));
  command
      ->add_option("--cuda-graph", arguments->cuda_graph,
                   "capture each training step's kernels and copies into CUDA graphs (true|false); every device "
                   "must be a cuda device (docs/cuda.md, \"CUDA graphs\")")
      ->capture_default_str();
  command->add_option("--profile", arguments->profile_dir,
                      "record memory; write snapshot.json, trace.json, trace-DEVICE.csv (one per device), "
                      "report.html, summary.txt there");
  command->callback([arguments] { run_train(*arguments); });
}

}  // namespace tp::cli

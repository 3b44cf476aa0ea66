// SPDX-License-Identifier: Apache-2.0
#include "model_setup.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <thread>

#include "option_checks.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/device/gemm_choice.hpp"
#include "tensorpool/device/missing_device.hpp"
#include "tensorpool/memory/memory_resource.hpp"

namespace tp::cli {
namespace {
// More host threads than this is a typo, not a machine.
constexpr int kMaxThreads = 1024;
}  // namespace

void add_model_options(CLI::App& command, ModelArguments& arguments) {
  command.add_option("--devices", arguments.devices, "comma-separated devices")->capture_default_str();
  command
      .add_option("--strategy", arguments.strategy,
                  "one | mirrored | multi_worker (under mpirun) | parameter_server (or ps; asynchronous, in-process "
                  "or under mpirun: rank 0 serves)")
      ->capture_default_str()
      ->check(one_of({"one", "mirrored", "multi_worker", "parameter_server", "ps"}));
  command.add_option("--batch-size", arguments.batch_size, "global batch size")->capture_default_str();
  command
      .add_option("--allocator", arguments.allocator,
                  "bfc | expandable | system | cuda_malloc_async | managed (the last two on cuda devices only: the "
                  "driver's stream-ordered pool, BFC over unified memory); default: expandable with --allow-growth "
                  "true (its reserved memory follows the plan), bfc when preallocating (TensorFlow's behaviour) and "
                  "on opencl devices")
      ->check(one_of({"bfc", "expandable", "system", "cuda_malloc_async", "managed"}));
  command
      .add_option("--bfc-split", arguments.bfc_split,
                  "--allocator bfc: tensorflow (TensorFlow's rule: a chunk under twice the request is handed out "
                  "whole) | exact (split off any leftover: no chunk holds more than the request rounded to 256 "
                  "bytes); default tensorflow")
      ->check(one_of({"exact", "tensorflow"}));
  command.add_option("--allow-growth", arguments.allow_growth, "grow device memory on demand (true) or preallocate")
      ->capture_default_str();
  command
      .add_option("--sim-memory", arguments.sim_memory,
                  "memory of each sim device, e.g. 1GiB; overrides TP_SIM_MEMORY (default: TP_SIM_MEMORY, "
                  "else 1GiB)")
      ->type_name("BYTES");
  command
      .add_option("--device-memory", arguments.device_memory,
                  "memory budget of each cuda device, e.g. 8GiB (TensorFlow's memory_limit); with --allocator managed "
                  "it may exceed the GPU's memory (oversubscription); default: the GPU's memory")
      ->type_name("BYTES");
  command
      .add_option("--all-reduce", arguments.all_reduce,
                  "auto | ring | reduce_to_one | nccl | mpi. auto: nccl over cuda devices each on a GPU of its own "
                  "(mirrored) or across workers with cuda devices (multi_worker), else ring (mirrored; logical devices "
                  "sharing one GPU keep it: NCCL takes one participant per GPU) or mpi (multi_worker); the choice is "
                  "logged")
      ->capture_default_str()
      ->check(one_of({"auto", "ring", "reduce_to_one", "nccl", "mpi"}));
  command
      .add_option("--shard", arguments.shard,
                  "auto | none | optimizer | gradients (ZeRO-1 / ZeRO-2; mirrored, or multi_worker with one device per "
                  "worker). auto: optimizer where the mirrored Adam update folds the all-reduce in (--fuse-update, "
                  "float32, the ring, sim devices), which is then the fastest and holds half the optimizer state per "
                  "replica; else none")
      ->capture_default_str()
      ->check(one_of({"auto", "none", "optimizer", "gradients"}));
  command
      .add_option("--bucket-size", arguments.bucket_size,
                  "mirrored, multi_worker: gradients are all-reduced in buckets of at most this size (e.g. 1MiB)")
      ->capture_default_str();
  command
      .add_option(
          "--fuse-update", arguments.fuse_update,
          "mirrored, Adam on sim devices: each replica's update reads every replica's gradient in place "
          "(AllReduceAdam, the all-reduce folded into it) instead of an AllReduce into a bucket; the same bits. "
          "With mixed_bfloat16 (also on one cpu or sim device) the update keeps the layers' bfloat16 weight "
          "copies, which are then not cast each step")
      ->capture_default_str();
  command
      .add_option("--multi-tensor-update", arguments.multi_tensor_update,
                  "the optimizer updates of each device in one multi-tensor node (ApplyAdamMulti / ApplySgdMulti: one "
                  "kernel launch per device and step) instead of one node per variable; the same bits")
      ->capture_default_str();
  command.add_option("--hidden", arguments.hidden, "hidden Dense relu widths, comma-separated (e.g. 4096,4096)")
      ->capture_default_str();
  command.add_option("--precision", arguments.precision, "float32 | mixed_float16 | mixed_bfloat16")
      ->capture_default_str()
      ->check(one_of({"float32", "mixed_float16", "mixed_bfloat16"}));
  command.add_option("--seed", arguments.seed, "initialisation and shuffle seed")->capture_default_str();
  command
      .add_option("--inter-op-threads", arguments.inter_op_threads,
                  "host threads launching a step's ops (> 1: independent ops, e.g. a gradient bucket's all-reduce "
                  "and the rest of the backward pass, may overlap); 0 or 1: in schedule order")
      ->capture_default_str()
      ->check(whole_number(0, kMaxThreads));
  command
      .add_option("--intra-op-threads", arguments.intra_op_threads,
                  "threads of each CPU kernel (GEMM blocks, element-wise chunks); 0: cores / devices")
      ->capture_default_str()
      ->check(whole_number(0, kMaxThreads));
  command
      .add_option("--gemm", arguments.gemm,
                  "float32 GEMM library: auto (per shape, the faster of the two on this machine, timed at its "
                  "first use and cached per machine) | openblas | onednn (the two differ in the last bits: pin "
                  "one to reproduce bits across machines); overrides TP_GEMM (default: TP_GEMM, else auto)")
      ->check(one_of({device::kGemmLibraryNames.begin(), device::kGemmLibraryNames.end()}));
  command.add_option("--ps-device", arguments.ps_device, "parameter_server: the device holding the variables")
      ->capture_default_str();
  command.add_option("--max-staleness", arguments.max_staleness,
                     "parameter_server: bound K >= 0 on how far workers drift apart (0: rounds); unset: unbounded");
}

std::vector<std::string> ModelSetup::used_devices() const { return distribution->named_devices(); }

device::Device& ModelSetup::batch_device() const {
  const std::vector<std::string> used = used_devices();
  const bool one_process = distribution->single_process();
  if (used.size() == 1 && one_process && manager->device(used.front()).shared_memory() != nullptr) {
    return manager->device(used.front());
  }
  return manager->device("cpu:0");
}

namespace {

std::optional<std::int64_t> parse_staleness(const std::string& text, const char* command) {
  if (text.empty()) return std::nullopt;
  std::int64_t value = 0;
  const auto [rest, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || rest != text.data() + text.size() || value < 0) {
    TP_THROW(InvalidArgument, command, "--max-staleness '", text,
             "' is not a whole number >= 0 (0: workers move in rounds; leave it out for unbounded asynchrony)");
  }
  return value;
}

// --shard; auto (train::Shard::automatic) refuses nothing: it shards only where the mirrored update folds.
bool shards(const ModelArguments& arguments) {
  const train::Shard shard = train::parse_shard(arguments.shard);
  return shard != train::Shard::none && shard != train::Shard::automatic;
}

train::Strategy parameter_server_strategy(const ModelArguments& arguments, const std::vector<std::string>& names,
                                          const char* command) {
  if (arguments.precision != "float32") {
    TP_THROW(InvalidArgument, command, "--precision ", arguments.precision,
             " is not available with --strategy parameter_server (its workers compute in float32); use --precision "
             "float32, or mixed precision with --strategy one or mirrored");
  }
  if (shards(arguments)) {
    TP_THROW(InvalidArgument, command, "--shard ", arguments.shard,
             " does not apply to --strategy parameter_server (the server alone holds the optimizer state); use "
             "--shard none, or ZeRO with --strategy mirrored or multi_worker");
  }
  if (arguments.ps_device.empty()) TP_THROW(InvalidArgument, command, "--ps-device is empty; write e.g. cpu:0");
  return train::Strategy::parameter_server(names, arguments.ps_device,
                                           parse_staleness(arguments.max_staleness, command));
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())) != 0) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) text.remove_suffix(1);
  return text;
}

// The entries of --devices, spaces around each dropped; an empty or repeated entry is refused (a device
// listed twice would run two replicas on one device's memory).
std::vector<std::string> device_names(const std::string& devices, const char* command) {
  std::vector<std::string> names;
  std::vector<device::DeviceId> ids;
  std::size_t start = 0;
  while (start <= devices.size()) {
    const std::size_t comma = std::min(devices.find(',', start), devices.size());
    const std::string name(trim(std::string_view(devices).substr(start, comma - start)));
    if (name.empty()) {
      TP_THROW(InvalidArgument, command, "--devices '", devices, "' has an empty entry; write e.g. sim:0,sim:1");
    }
    const device::DeviceId id = device::parse_device_id(name, "--devices entry");
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
      TP_THROW(InvalidArgument, command, "--devices '", devices, "' lists ", id.str(),
               " twice; list each device once (e.g. sim:0,sim:1)");
    }
    names.push_back(id.str());
    ids.push_back(id);
    start = comma + 1;
  }
  return names;
}

// One rule for the simulated devices, flag over environment: their memory is --sim-memory when given, else
// TP_SIM_MEMORY, else DeviceManagerOptions' default; their count is TP_SIM_DEVICES when set, else as many as
// the highest sim index the run names.
void configure_sim_devices(device::DeviceManager& manager, const ModelArguments& arguments,
                           const std::vector<std::string>& used, const char* command) {
  device::DeviceManagerOptions environment;
  device::apply_device_env(environment, ::getenv);
  std::size_t memory_bytes = environment.sim_memory_bytes;
  if (!arguments.sim_memory.empty()) {
    memory_bytes = parse_bytes(arguments.sim_memory, "--sim-memory");
    if (memory_bytes < device::kMinSimMemoryBytes || memory_bytes > memory::kMaxAllocationBytes) {
      TP_THROW(InvalidArgument, command, "--sim-memory ", arguments.sim_memory, " is outside [",
               format_bytes(device::kMinSimMemoryBytes), ", ", format_bytes(memory::kMaxAllocationBytes),
               "]; give each simulated device's memory, e.g. 1GiB");
    }
  }
  int count = environment.sim_devices;
  if (std::getenv("TP_SIM_DEVICES") == nullptr) {
    count = 0;
    for (const std::string& name : used) {
      const device::DeviceId id = device::parse_device_id(name, "--devices entry");
      if (id.kind == device::DeviceKind::sim) count = std::max(count, id.index + 1);
    }
  }
  manager.set_sim_devices(count, memory_bytes);
}

// The OpenCL driver is loaded only for a run that can use an opencl device: one that names one, or sets
// TP_OPENCL_DEVICES or a TP_VISIBLE_DEVICES list with one. Any other run plans none, so it does not map the
// driver (PoCL brings LLVM) into the process.
void configure_opencl_devices(device::DeviceManager& manager, const std::vector<std::string>& used) {
  device::DeviceManagerOptions environment;
  device::apply_device_env(environment, ::getenv);
  const auto is_opencl = [](const device::DeviceId& id) { return id.kind == device::DeviceKind::opencl; };
  const bool visible_opencl = environment.visible_devices && std::any_of(environment.visible_devices->begin(),
                                                                         environment.visible_devices->end(), is_opencl);
  const bool used_opencl = std::any_of(used.begin(), used.end(), [&](const std::string& name) {
    return is_opencl(device::parse_device_id(name, "--devices entry"));
  });
  if (!environment.opencl_devices && !visible_opencl && !used_opencl) manager.set_opencl_devices(0);
}

// Each device the run uses must exist; the error names the missing one, the devices this process has, and
// the setting that would provide it.
void check_devices_exist(const device::DeviceManager& manager, const ModelSetup& setup, const char* command) {
  const std::vector<std::string> used = setup.used_devices();
  const std::vector<device::DeviceId> existing = manager.planned_devices();
  for (const std::string& name : used) {
    const device::DeviceId id = device::parse_device_id(name, "--devices entry");
    if (std::find(existing.begin(), existing.end(), id) != existing.end()) continue;
    const bool listed_in_devices = std::find(setup.names.begin(), setup.names.end(), name) != setup.names.end();
    TP_THROW(
        InvalidArgument, command, listed_in_devices ? "--devices" : "--ps-device", " names ", id.str(),
        ", which does not exist: ",
        device::missing_device_advice(
            id, existing,
            {.use = "--devices ", .sim_note = "(or unset it: the run then creates the sim devices --devices names)"}));
  }
}

// `estimate` plans and runs nothing, so on a machine without a GPU it plans its cuda devices as planning-only
// ones of --device-memory's capacity (DeviceManager::set_cuda_planning_devices); each device's note in the
// output says so. `train` and `profile` run steps, and never get such devices: without a GPU, their cuda
// devices do not exist (check_devices_exist says why).
void configure_cuda_planning(device::DeviceManager& manager, const ModelArguments& arguments,
                             const std::vector<std::string>& used, std::optional<std::size_t> device_memory,
                             const char* command) {
  if (std::string_view(command) != "estimate") return;
  int count = 0;
  std::string first;
  for (const std::string& name : used) {
    const device::DeviceId id = device::parse_device_id(name, "--devices entry");
    if (id.kind != device::DeviceKind::cuda) continue;
    if (first.empty()) first = id.str();
    count = std::max(count, id.index + 1);
  }
  if (count == 0 || !device::cuda_physical_devices().empty()) return;  // a GPU plans for itself
  if (!device_memory) {
    TP_THROW(InvalidArgument, command, "--devices names ", first, ", and no GPU is present (",
             device::cuda_unavailable_reason(),
             "); to plan for a GPU on this machine, give its memory with "
             "--device-memory, e.g. --device-memory 80GiB");
  }
  manager.set_cuda_planning_devices(count, *device_memory, "--device-memory " + arguments.device_memory);
}

// --bfc-split is BFC's: given for a device whose allocator has no split policy, it would change nothing, which
// is a mistake in the command line rather than a no-op to pass over.
void check_bfc_split(const ModelArguments& arguments, memory::AllocatorKind allocator, const std::string& device,
                     const char* command) {
  if (arguments.bfc_split.empty() || allocator == memory::AllocatorKind::bfc) return;
  TP_THROW(InvalidArgument, command, "--bfc-split ", arguments.bfc_split, " applies to the bfc allocator, and ", device,
           " uses ", memory::to_string(allocator), arguments.allocator.empty() ? " (its default)" : "",
           "; pass --allocator bfc, or leave --bfc-split out");
}

}  // namespace

ModelSetup configure_model_devices(const ModelArguments& arguments, const char* command) {
  ModelSetup setup;
  setup.names = device_names(arguments.devices, command);
  if (arguments.batch_size <= 0) TP_THROW(InvalidArgument, command, "--batch-size must be positive");
  if (arguments.strategy == "one") {
    if (setup.names.size() != 1) {
      TP_THROW(InvalidArgument, command, "--strategy one takes one device; --devices has ", setup.names.size());
    }
    if (shards(arguments)) {
      TP_THROW(InvalidArgument, command, "--shard ", arguments.shard,
               " needs the mirrored strategy over several devices; use --strategy mirrored");
    }
    setup.strategy = train::Strategy::one_device(setup.names[0]);
  } else if (arguments.strategy == "mirrored") {
    setup.strategy = train::Strategy::mirrored(setup.names, arguments.all_reduce, train::parse_shard(arguments.shard));
  } else if (arguments.strategy == "multi_worker") {
    setup.strategy = train::Strategy::multi_worker(setup.names, train::parse_shard(arguments.shard),
                                                   train::parse_all_reduce(arguments.all_reduce));
  } else if (arguments.strategy == "parameter_server" || arguments.strategy == "ps") {
    setup.strategy = parameter_server_strategy(arguments, setup.names, command);
  } else {
    TP_THROW(InvalidArgument, command, "--strategy '", arguments.strategy,
             "' is not one, mirrored, multi_worker (under mpirun) or parameter_server");
  }
  const std::size_t bucket_bytes = parse_bytes(arguments.bucket_size, "--bucket-size");
  if (bucket_bytes == 0) {
    TP_THROW(InvalidArgument, command, "--bucket-size '", arguments.bucket_size,
             "' is zero; a bucket needs room for a gradient (e.g. 25MiB, the default, or 1MiB)");
  }
  setup.strategy.bucket_bytes = static_cast<std::int64_t>(bucket_bytes);
  setup.strategy.fuse_update = arguments.fuse_update;
  setup.strategy.multi_tensor_update = arguments.multi_tensor_update;
  setup.distribution = train::make_distribution_strategy(setup.strategy);
  if (!setup.distribution->runs_own_loop() && !arguments.max_staleness.empty()) {  // asynchronous workers only
    TP_THROW(InvalidArgument, command, "--max-staleness applies to --strategy parameter_server only, not ",
             arguments.strategy);
  }
  memory::MemoryConfig config = device::DeviceManagerOptions::default_device_memory_config();
  config.policy = arguments.allow_growth ? memory::GrowthPolicy::grow : memory::GrowthPolicy::preallocate;
  if (arguments.allocator.empty()) {  // each device's default; an accelerator's here, an opencl device's below
    config.allocator = device::default_allocator(device::DeviceKind::sim, config.policy);
  } else if (arguments.allocator == "bfc") {
    config.allocator = memory::AllocatorKind::bfc;
  } else if (arguments.allocator == "expandable") {
    config.allocator = memory::AllocatorKind::expandable;
  } else if (arguments.allocator == "system") {
    config.allocator = memory::AllocatorKind::system;
  } else if (arguments.allocator == "cuda_malloc_async") {
    config.allocator = memory::AllocatorKind::cuda_malloc_async;
  } else if (arguments.allocator == "managed") {
    config.allocator = memory::AllocatorKind::managed;
  } else {
    TP_THROW(InvalidArgument, command, "--allocator '", arguments.allocator,
             "' is not bfc, expandable, system, cuda_malloc_async or managed");
  }
  if (!arguments.bfc_split.empty()) {
    config.bfc_split = arguments.bfc_split == "exact" ? memory::BfcSplit::exact : memory::BfcSplit::tensorflow;
  }
  device::DeviceManager& manager = device::DeviceManager::instance();
  configure_sim_devices(manager, arguments, setup.used_devices(), command);
  configure_opencl_devices(manager, setup.used_devices());
  const std::vector<std::string> used = setup.used_devices();
  std::optional<std::size_t> device_memory;
  if (!arguments.device_memory.empty()) {
    device_memory = parse_bytes(arguments.device_memory, "--device-memory");
    const bool uses_cuda = std::any_of(used.begin(), used.end(), [](const std::string& name) {
      return device::parse_device_id(name, "--devices entry").kind == device::DeviceKind::cuda;
    });
    if (!uses_cuda) {
      TP_THROW(InvalidArgument, command, "--device-memory ", arguments.device_memory,
               " sets the budget of cuda devices, and the run uses none; use --sim-memory for sim devices");
    }
    if (*device_memory == 0 || *device_memory > memory::kMaxAllocationBytes) {
      TP_THROW(InvalidArgument, command, "--device-memory ", arguments.device_memory, " is outside (0, ",
               format_bytes(memory::kMaxAllocationBytes), "]; give each cuda device's budget, e.g. 8GiB");
    }
  }
  configure_cuda_planning(manager, arguments, used, device_memory, command);
  check_devices_exist(manager, setup, command);
  for (const std::string& name : used) {
    const device::DeviceId id = device::parse_device_id(name, "--devices entry");
    if (id.kind == device::DeviceKind::cpu) continue;
    memory::MemoryConfig device_config = config;
    if (arguments.allocator.empty()) device_config.allocator = device::default_allocator(id.kind, config.policy);
    if (id.kind == device::DeviceKind::cuda && device_memory) {
      device_config.limit_bytes = *device_memory;
      device_config.fraction.reset();
    }
    check_bfc_split(arguments, device_config.allocator, name, command);
    manager.set_memory_config(id, device_config);
  }
  setup.manager = &manager;
  for (const std::string& name : setup.names) setup.devices.push_back(&manager.device(name));
  return setup;
}

std::vector<train::Dense> dense_layers(const std::string& hidden) {
  std::vector<train::Dense> layers;
  std::size_t begin = 0;
  while (begin <= hidden.size()) {
    const std::size_t end = std::min(hidden.find(',', begin), hidden.size());
    const std::string text = hidden.substr(begin, end - begin);
    std::int64_t units = 0;
    const auto [rest, error] = std::from_chars(text.data(), text.data() + text.size(), units);
    if (text.empty() || error != std::errc() || rest != text.data() + text.size() || units <= 0) {
      TP_THROW(InvalidArgument, "cli", "--hidden '", hidden, "': '", text,
               "' is not a positive layer width; give widths separated by commas, e.g. 512 or 4096,4096");
    }
    layers.push_back({.units = units, .activation = train::Activation::relu});
    begin = end + 1;
  }
  layers.push_back({.units = 10, .activation = train::Activation::softmax});
  return layers;
}

std::string gemm_setting(const ModelArguments& arguments) {
  if (!arguments.gemm.empty()) return arguments.gemm;
  device::DeviceManagerOptions environment;
  device::apply_device_env(environment, ::getenv);
  const std::string& from_environment = environment.device_options.kernels.gemm_library;
  return from_environment.empty() ? "auto" : from_environment;
}

std::unique_ptr<train::Sequential> build_mlp(const ModelArguments& arguments, const ModelSetup& setup) {
  if (arguments.intra_op_threads < 0) TP_THROW(InvalidArgument, "cli", "--intra-op-threads must be >= 0");
  if (arguments.inter_op_threads < 0) TP_THROW(InvalidArgument, "cli", "--inter-op-threads must be >= 0");
  const auto cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = arguments.intra_op_threads > 0
                          ? arguments.intra_op_threads
                          : std::max(1, cores / static_cast<int>(std::max<std::size_t>(1, setup.names.size())));
  const train::DTypePolicy policy = train::DTypePolicy::from_name(arguments.precision, "--precision");
  auto model = std::make_unique<train::Sequential>(std::vector<std::int64_t>{784}, dense_layers(arguments.hidden));
  model->compile({.optimizer = train::Adam{},
                  .loss = train::Loss::sparse_categorical_crossentropy,
                  .seed = arguments.seed,
                  .policy = policy},
                 setup.strategy,
                 {.name = "train",
                  .intra_op_threads = threads,
                  .gemm_library = gemm_setting(arguments),
                  .inter_op_threads = arguments.inter_op_threads});
  return model;
}

}  // namespace tp::cli

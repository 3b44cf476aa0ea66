// SPDX-License-Identifier: Apache-2.0
#pragma once
// What `tensorpool train`, `estimate` and `profile` share: the model flags (devices, strategy, batch size,
// allocator, BFC split policy, growth, sim memory, all-reduce, shard, hidden widths, precision, seed, BLAS
// threads), the devices configured from them, and the compiled MLP (784 - hidden relu layers - 10 softmax,
// Adam, sparse categorical cross-entropy; the Keras example by default). One parser, so a command line moves
// between the commands.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/train/distribution_strategy.hpp"
#include "tensorpool/train/sequential.hpp"
#include "tensorpool/train/strategy.hpp"

namespace tp::cli {

struct ModelArguments {
  std::string devices = "sim:0,sim:1";
  std::string strategy = "mirrored";
  std::int64_t batch_size = 32;
  std::string allocator;  // bfc | expandable | system | cuda_malloc_async | managed; empty: device::default_allocator
  std::string bfc_split;  // exact | tensorflow; empty: the config's (tensorflow, or TP_BFC_SPLIT)
  bool allow_growth = true;
  std::string sim_memory;     // empty: TP_SIM_MEMORY, else 1GiB (a flag overrides the environment)
  std::string device_memory;  // each cuda device's budget (limit_bytes); empty: the default fraction of the GPU
  std::string all_reduce = "auto";
  std::string shard = "auto";         // auto | none | optimizer (ZeRO-1) | gradients (ZeRO-2): train::Shard
  std::string bucket_size = "25MiB";  // mirrored, multi_worker: the AllReduce buckets' size limit
  bool fuse_update = true;            // mirrored, Adam on sim devices: Strategy::fuse_update
  bool multi_tensor_update = true;    // one update node per device: Strategy::multi_tensor_update
  std::string hidden = "512";         // hidden Dense relu widths, comma-separated
  std::string precision = "float32";  // float32 | mixed_float16 | mixed_bfloat16
  std::uint64_t seed = 42;
  int intra_op_threads = 0;         // 0: the cores divided between the devices
  std::string gemm;                 // the float32 GEMM library: auto | openblas | onednn; empty: gemm_setting
  int inter_op_threads = 0;         // SessionOptions::inter_op_threads
  std::string ps_device = "cpu:0";  // parameter_server: where the variables and optimizer state live
  std::string max_staleness;        // parameter_server: the bound K >= 0; empty: unbounded
};

void add_model_options(CLI::App& command, ModelArguments& arguments);

// The run's devices, strategy and configured manager; `command` names the subcommand in errors.
struct ModelSetup {
  std::vector<std::string> names;
  train::Strategy strategy;
  // The strategy's implementation: what the commands ask instead of switching on its kind.
  std::shared_ptr<const train::DistributionStrategy> distribution;
  device::DeviceManager* manager = nullptr;
  std::vector<device::Device*> devices;  // the named devices, in order
  // The devices the run uses: `names`, and first the parameter device under the parameter-server strategy.
  std::vector<std::string> used_devices() const;
  // Where the run's batches are assembled (Dataset::stage_on), and what Sequential::plan is told: the one device
  // the run uses when it has shared memory (opencl with fine-grained SVM) and the strategy neither serves
  // parameters nor spans processes, so a step reads its batch in place; cpu:0 otherwise.
  device::Device& batch_device() const;
};
ModelSetup configure_model_devices(const ModelArguments& arguments, const char* command);

// The run's float32 GEMM library, flag over environment: --gemm when given, else TP_GEMM, else "auto".
std::string gemm_setting(const ModelArguments& arguments);

// The hidden Dense relu layers ("512", "4096,4096"), then the Dense 10 softmax output; throws naming the flag.
std::vector<train::Dense> dense_layers(const std::string& hidden);

// The compiled MLP on the setup's strategy (nothing is allocated on the devices until its first step).
std::unique_ptr<train::Sequential> build_mlp(const ModelArguments& arguments, const ModelSetup& setup);

}  // namespace tp::cli

// SPDX-License-Identifier: Apache-2.0
// tp_profiler_bench: what recording costs. The MLP training step (784-512-10, Adam, one sim device, synthetic
// data) timed with the memory profiler off and on, on the same model in alternating rounds (medians), with the
// static planner on (the default: a step allocates little on the device; the host still stages fetches) and
// off (every tensor from the online allocator: the worst case, every tensor an event); and the cost of one
// recorded allocate + free pair on a bare sim stack.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "support/mlp_bench_model.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/profile/memory_profiler.hpp"
#include "tensorpool/train/sequential.hpp"

namespace {

using Model = tp::bench::MlpBenchModel;

std::unique_ptr<Model> make_model(bool planner, std::int64_t batch) {
  return tp::bench::make_mlp_bench_model(batch, {.name = "bench", .planner = planner});
}

double time_steps(Model& model, int steps) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) model.sequential.train_step(model.x, model.labels, ++model.step);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Nanoseconds per allocate + free of 4 KiB on a tracked sim stack, with or without a recorder attached.
double pair_ns(bool recording, int pairs) {
  tp::device::DeviceManager manager(
      [] {
        tp::device::DeviceManagerOptions options;
        options.sim_devices = 1;
        options.sim_memory_bytes = 256 * tp::kMiB;
        return options;
      }(),
      [](const char*) -> const char* { return nullptr; });
  tp::device::Device& device = manager.device("sim:0");
  std::unique_ptr<tp::profile::MemoryProfiler> profiler;
  if (recording) profiler = std::make_unique<tp::profile::MemoryProfiler>(std::vector<tp::device::Device*>{&device});
  tp::memory::MemoryResource& memory = device.memory();
  const tp::memory::AllocationTag tag{
      "dense/MatMul:0", "MatMul", {32, 512}, "float32", tp::memory::AllocationKind::activation, 1};
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) memory.deallocate(memory.allocate(4096, 256, tag), 4096);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / pairs;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tp_profiler_bench: training step time with the memory profiler off and on"};
  int rounds = 7;
  int steps = 40;
  int pairs = 200000;
  app.add_option("--rounds", rounds, "alternating rounds (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "training steps per timed round")->check(CLI::PositiveNumber);
  app.add_option("--pairs", pairs, "allocate + free pairs for the per-event cost")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::printf("| planner | batch | events per step | step ms profiler off | step ms profiler on | overhead |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (bool planner : {true, false}) {
    for (std::int64_t batch : {32, 128}) {
      auto model = make_model(planner, batch);
      time_steps(*model, 3);  // warm up: variables, arena, BLAS buffers
      std::vector<double> off, on;
      std::size_t events = 0;
      for (int round = 0; round < rounds; ++round) {
        off.push_back(time_steps(*model, steps));
        tp::profile::MemoryProfiler profiler(model->manager.devices());
        on.push_back(time_steps(*model, steps));
        std::size_t recorded = 0;
        for (const tp::profile::DeviceSnapshot& device : profiler.snapshot().devices) {
          recorded += device.events.size() + device.dropped_events;
        }
        events = recorded / static_cast<std::size_t>(steps);
      }
      std::printf("| %s | %lld | %zu | %.3f | %.3f | %+.1f%% |\n", planner ? "on" : "off",
                  static_cast<long long>(batch), events, median(off) * 1e3, median(on) * 1e3,
                  100.0 * (median(on) / median(off) - 1.0));
    }
  }
  std::vector<double> bare, recorded;
  for (int round = 0; round < 3; ++round) {
    bare.push_back(pair_ns(false, pairs));
    recorded.push_back(pair_ns(true, pairs));
  }
  std::printf(
      "\nallocate + free of 4 KiB on a tracked sim stack: %.0f ns without the recorder, %.0f ns with it "
      "(+%.0f ns per pair)\n",
      median(bare), median(recorded), median(recorded) - median(bare));
  return 0;
}

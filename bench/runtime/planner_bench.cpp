// SPDX-License-Identifier: Apache-2.0
// tp_planner_bench: the static memory planner on the MLP training step (784-512-10, Adam, one sim device),
// batch 32 and 128: planned peak against the liveness lower bound and against the online BFC allocator's
// peak reserved bytes for the same step, and step time with the planner on and off, alternating rounds
// (medians), and with two inter-op threads over two streams of the device. Synthetic data: the figures do
// not depend on the values.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "support/mlp_bench_model.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/train/sequential.hpp"

namespace {

struct Measured {
  double seconds_per_step = 0;
  std::size_t peak_reserved = 0;
  std::size_t peak_requested = 0;
  tp::runtime::DevicePlan plan;
};

using Model = tp::bench::MlpBenchModel;

std::unique_ptr<Model> make_model(bool planner, std::int64_t batch, int inter_op_threads = 1) {
  return tp::bench::make_mlp_bench_model(
      batch, {.name = planner ? "planned" : "online", .planner = planner, .inter_op_threads = inter_op_threads},
      static_cast<std::size_t>(inter_op_threads));
}

double time_steps(Model& model, int steps, std::int64_t& step) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) model.sequential.train_step(model.x, model.labels, ++step);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tp_planner_bench: static plan vs lower bound vs online BFC, and step time planner on/off"};
  int rounds = 5;
  int steps = 50;
  app.add_option("--rounds", rounds, "alternating rounds (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "training steps per timed round")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::printf(
      "| batch | lower bound | planned arena | arena / bound | planned peak | online BFC peak reserved |"
      " online / planned | step ms planner on | step ms planner off | off / on | step ms 2 inter-op threads |"
      " 2 threads / 1 |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (std::int64_t batch : {32, 128}) {
    auto planned = make_model(true, batch);
    auto online = make_model(false, batch);
    auto concurrent = make_model(true, batch, 2);
    const tp::runtime::DevicePlan plan = planned->sequential.plan(batch).devices.at(0);
    std::int64_t planned_step = 0, online_step = 0, concurrent_step = 0;
    time_steps(*planned, 3, planned_step);  // warm up: variables, arena, BLAS buffers
    time_steps(*online, 3, online_step);
    time_steps(*concurrent, 3, concurrent_step);
    tp::memory::MemoryResource& online_memory = online->manager.device("sim:0").memory();
    online_memory.reset_peak();
    time_steps(*online, 1, online_step);
    const std::size_t online_reserved = online_memory.stats().peak_bytes_reserved;
    std::vector<double> on, off, two_threads;
    for (int round = 0; round < rounds; ++round) {
      on.push_back(time_steps(*planned, steps, planned_step));
      off.push_back(time_steps(*online, steps, online_step));
      two_threads.push_back(time_steps(*concurrent, steps, concurrent_step));
    }
    std::printf("| %lld | %s | %s | %.4f | %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
                static_cast<long long>(batch), tp::format_bytes(plan.lower_bound_bytes).c_str(),
                tp::format_bytes(plan.arena_bytes).c_str(),
                static_cast<double>(plan.arena_bytes) / static_cast<double>(plan.lower_bound_bytes),
                tp::format_bytes(plan.planned_peak_bytes).c_str(), tp::format_bytes(online_reserved).c_str(),
                static_cast<double>(online_reserved) / static_cast<double>(plan.planned_peak_bytes), median(on) * 1e3,
                median(off) * 1e3, median(off) / median(on), median(two_threads) * 1e3,
                median(two_threads) / median(on));
  }
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// tp_kernel_bench: what our op layer costs over the BLAS it calls, and what a staged host-to-sim copy costs
// over a plain memcpy. Each pair is measured side by side, alternating ours and the baseline round by round,
// and reported as medians of the rounds (the machines are shared and noisy).
//
//   GEMM: ops::matmul_into on a device (validation, a task on the device's stream, the wait) against the
//   raw cblas_sgemm on host buffers of the same shapes; overhead = ours / raw - 1.
//   Copy: Device::copy_from_host + stream synchronize into a sim device (staged through pinned memory) against
//   one memcpy of the same size between host buffers.
//
// --sgemm-rate prints instead one JSON line, the roofline input of bench/peers/compare_peers.py: the
// single-threaded (openblas_set_num_threads(1)) raw cblas_sgemm rate (--library onednn: oneDNN's dnnl_sgemm
// on one OpenMP thread) over the GEMMs of one MLP training step
// (784-512-10; forward 2 GEMMs, layer-2 input gradient, both weight gradients) at batch 32 and 128, weighted
// by FLOPs (total FLOPs / total time of one call of each), median of the rounds.
//
// --half-gemm prints instead the 16-bit GEMMs of mixed precision against float32 on the same MLP shapes, one
// thread, alternating round by round: matmul_half<BFloat16> (oneDNN on the CPU's bfloat16 instructions where
// it has them), matmul_half<Half> (converted to float32 around sgemm), the raw cblas_sgemm and dnnl_sgemm;
// the ratios are against the faster float32 library of each shape. --batches picks the batch sizes.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/kernels/bf16_gemm.hpp"
#include "backend/cpu/kernels/half_nn.hpp"
#include "support/mlp_gemms.hpp"
#include "support/timing.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/ops/init.hpp"
#include "tensorpool/ops/linalg.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using tp::bench::gemm_operands;
using tp::bench::GemmCase;
using tp::bench::median;
using tp::bench::raw_sgemm;
using tp::bench::time_per_call;
using tp::bench::training_gemms;

struct Pair {
  double ours = 0;
  double baseline = 0;
};

Pair alternate(const std::function<void()>& ours, const std::function<void()>& baseline, int rounds, double seconds) {
  std::vector<double> ours_times, baseline_times, ratios;
  for (int round = 0; round < rounds; ++round) {
    ours_times.push_back(time_per_call(ours, seconds));
    baseline_times.push_back(time_per_call(baseline, seconds));
    ratios.push_back(ours_times.back() / baseline_times.back());
  }
  return {median(ours_times), median(baseline_times)};
}

void bench_gemm(tp::device::Device& device, const GemmCase& shape, int rounds, double seconds) {
  using tp::Shape;
  using tp::Tensor;
  const Shape a_shape = shape.transpose_a ? Shape{shape.k, shape.m} : Shape{shape.m, shape.k};
  const Shape b_shape = shape.transpose_b ? Shape{shape.n, shape.k} : Shape{shape.k, shape.n};
  Tensor a = Tensor::empty(a_shape, tp::DType::f32, device);
  Tensor b = Tensor::empty(b_shape, tp::DType::f32, device);
  Tensor c = Tensor::empty(Shape{shape.m, shape.n}, tp::DType::f32, device);
  tp::ops::uniform(a, -1, 1, 1);
  tp::ops::uniform(b, -1, 1, 2);
  device.synchronize();
  auto [host_a, host_b, host_c] = gemm_operands(shape);
  // Ours is measured two ways: pipelined (a burst of kBurst ops, then one wait: how a step runs) and
  // synchronised after every op (the latency of one op round trip through the stream).
  constexpr int kBurst = 16;
  auto ours = [&](int burst) {
    for (int call = 0; call < burst; ++call) {
      tp::ops::matmul_into(a, b, c, {.transpose_a = shape.transpose_a, .transpose_b = shape.transpose_b});
    }
    device.stream().synchronize();
  };
  auto raw = [&](int burst) {
    for (int call = 0; call < burst; ++call) raw_sgemm(shape, host_a.data(), host_b.data(), host_c.data());
  };
  const Pair pair = alternate([&] { ours(kBurst); }, [&] { raw(kBurst); }, rounds, seconds);
  const Pair synchronised = alternate([&] { ours(1); }, [&] { raw(1); }, rounds, seconds);
  const double flops = kBurst * 2.0 * static_cast<double>(shape.m * shape.n * shape.k);
  std::printf("| %-5s | %-22s | %4lldx%4lldx%4lld%s%s | %8.2f | %8.2f | %+6.1f%% | %+6.1f%% |\n", device.name().c_str(),
              shape.role, static_cast<long long>(shape.m), static_cast<long long>(shape.n),
              static_cast<long long>(shape.k), shape.transpose_a ? " tA" : "", shape.transpose_b ? " tB" : "",
              flops / pair.ours / 1e9, flops / pair.baseline / 1e9, (pair.ours / pair.baseline - 1) * 100,
              (synchronised.ours / synchronised.baseline - 1) * 100);
}

void bench_copy(tp::device::Device& device, std::size_t bytes, int rounds, double seconds) {
  auto buffer = device.allocate(bytes);
  std::vector<char> source(bytes, 1), target(bytes);
  const Pair pair = alternate(
      [&] {
        device.copy_from_host(device.stream(), source.data(), buffer, 0, bytes);
        device.stream().synchronize();
      },
      [&] { std::memcpy(target.data(), source.data(), bytes); }, rounds, seconds);
  std::printf("| %-5s | %9s | %8.2f | %8.2f | %5.2f |\n", device.name().c_str(), tp::format_bytes(bytes).c_str(),
              static_cast<double>(bytes) / pair.ours / 1e9, static_cast<double>(bytes) / pair.baseline / 1e9,
              pair.baseline / pair.ours);
}

// --sgemm-rate: one JSON line {"sgemm_gflops": X, "shapes": [...], ...}. Each round times every GEMM once
// (time_per_call over `seconds`); the round's rate is its total FLOPs over its total time; medians of rounds.
int sgemm_rate(int rounds, double seconds, const std::string& library) {
  openblas_set_num_threads(1);
  const auto sgemm = library == "onednn" ? tp::bench::raw_onednn_sgemm : raw_sgemm;
  const std::vector<std::int64_t> batches = {32, 128};
  struct Case {
    std::int64_t batch;
    GemmCase shape;
    tp::bench::GemmOperands operands;
    std::vector<double> seconds_per_call;
  };
  std::vector<Case> cases;
  for (std::int64_t batch : batches) {
    for (const GemmCase& shape : training_gemms(batch)) cases.push_back({batch, shape, gemm_operands(shape), {}});
  }
  auto flops_of = [](const GemmCase& shape) { return 2.0 * static_cast<double>(shape.m * shape.n * shape.k); };
  std::vector<double> total_rates;
  std::vector<std::vector<double>> batch_rates(batches.size());
  // Process CPU time over wall time: well under 1 means the core was shared and the rate is understated.
  const std::clock_t cpu_start = std::clock();
  const auto wall_start = Clock::now();
  for (int round = 0; round < rounds; ++round) {
    double total_flops = 0, total_time = 0;
    std::vector<double> batch_flops(batches.size(), 0), batch_time(batches.size(), 0);
    for (Case& entry : cases) {
      const GemmCase& shape = entry.shape;
      tp::bench::GemmOperands& operands = entry.operands;
      const double per_call =
          time_per_call([&] { sgemm(shape, operands.a.data(), operands.b.data(), operands.c.data()); }, seconds);
      entry.seconds_per_call.push_back(per_call);
      const auto index =
          static_cast<std::size_t>(std::find(batches.begin(), batches.end(), entry.batch) - batches.begin());
      total_flops += flops_of(shape);
      total_time += per_call;
      batch_flops[index] += flops_of(shape);
      batch_time[index] += per_call;
    }
    total_rates.push_back(total_flops / total_time);
    for (std::size_t index = 0; index < batches.size(); ++index)
      batch_rates[index].push_back(batch_flops[index] / batch_time[index]);
  }
  const double cpu_per_wall = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC /
                              std::chrono::duration<double>(Clock::now() - wall_start).count();
  double flops_per_sample = 0;  // batch 1: every GEMM is linear in the batch
  for (const GemmCase& shape : training_gemms(1)) flops_per_sample += flops_of(shape);
  std::printf(
      "{\"sgemm_gflops\": %.3f, \"library\": \"%s\", \"threads\": 1, \"rounds\": %d, \"seconds\": %g, "
      "\"flops_per_sample\": %.0f, \"cpu_per_wall\": %.3f",
      median(total_rates) / 1e9, library.c_str(), rounds, seconds, flops_per_sample, cpu_per_wall);
  std::printf(", \"by_batch\": {");
  for (std::size_t index = 0; index < batches.size(); ++index)
    std::printf("%s\"%lld\": %.3f", index ? ", " : "", static_cast<long long>(batches[index]),
                median(batch_rates[index]) / 1e9);
  std::printf("}, \"shapes\": [");
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const Case& entry = cases[index];
    const double per_call = median(entry.seconds_per_call);
    std::printf(
        "%s{\"batch\": %lld, \"role\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"transpose_a\": %s, "
        "\"transpose_b\": %s, \"flops\": %.0f, \"us_per_call\": %.3f, \"gflops\": %.3f}",
        index ? ", " : "", static_cast<long long>(entry.batch), entry.shape.role, static_cast<long long>(entry.shape.m),
        static_cast<long long>(entry.shape.n), static_cast<long long>(entry.shape.k),
        entry.shape.transpose_a ? "true" : "false", entry.shape.transpose_b ? "true" : "false", flops_of(entry.shape),
        per_call * 1e6, flops_of(entry.shape) / per_call / 1e9);
  }
  std::printf("]}\n");
  return 0;
}

// --half-gemm: a Markdown table of GFLOP/s per shape and the FLOP-weighted total per batch.
int half_gemm(int rounds, double seconds, const std::vector<std::int64_t>& batches) {
  using tp::BFloat16;
  using tp::Half;
  using tp::backend::cpu::Transpose;
  openblas_set_num_threads(1);
  std::printf("16-bit GEMMs (bfloat16 via %s), one thread, GFLOP/s, medians of %d alternating rounds\n\n",
              tp::backend::cpu::bf16_gemm_native() ? "oneDNN on AVX512_BF16" : "conversion around sgemm", rounds);
  std::printf(
      "| batch | role | m x n x k | float32 OpenBLAS | float32 oneDNN | bfloat16 | float16 (converted) | bf16 / f32 | "
      "f16 / f32 |\n");
  std::printf("|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const std::int64_t batch : batches) {
    // f32 is the faster float32 library of each shape, as `--gemm auto` would pick it.
    double flops_total = 0, f32_total = 0, openblas_total = 0, onednn_total = 0, bf16_total = 0, f16_total = 0;
    for (const GemmCase& shape : training_gemms(batch)) {
      auto [a, b, c] = gemm_operands(shape);
      const std::size_t a_size = a.size(), b_size = b.size();
      std::vector<BFloat16> a_bf(a_size), b_bf(b_size), c_bf(c.size());
      std::vector<Half> a_h(a_size), b_h(b_size), c_h(c.size());
      for (std::size_t i = 0; i < a_size; ++i) a_bf[i] = BFloat16::from_float(a[i]), a_h[i] = Half::from_float(a[i]);
      for (std::size_t i = 0; i < b_size; ++i) b_bf[i] = BFloat16::from_float(b[i]), b_h[i] = Half::from_float(b[i]);
      const Transpose ta = shape.transpose_a ? Transpose::yes : Transpose::no;
      const Transpose tb = shape.transpose_b ? Transpose::yes : Transpose::no;
      std::vector<double> openblas, onednn, bf16, f16;
      for (int round = 0; round < rounds; ++round) {
        openblas.push_back(time_per_call([&] { raw_sgemm(shape, a.data(), b.data(), c.data()); }, seconds));
        onednn.push_back(time_per_call([&] { raw_onednn_sgemm(shape, a.data(), b.data(), c.data()); }, seconds));
        bf16.push_back(time_per_call(
            [&] {
              tp::backend::cpu::matmul_half<BFloat16>(ta, tb, shape.m, shape.n, shape.k, a_bf.data(), b_bf.data(),
                                                      c_bf.data());
            },
            seconds));
        f16.push_back(time_per_call(
            [&] {
              tp::backend::cpu::matmul_half<Half>(ta, tb, shape.m, shape.n, shape.k, a_h.data(), b_h.data(),
                                                  c_h.data());
            },
            seconds));
      }
      const double flops = 2.0 * static_cast<double>(shape.m * shape.n * shape.k);
      const double f32 = std::min(median(openblas), median(onednn));
      flops_total += flops;
      f32_total += f32;
      openblas_total += median(openblas);
      onednn_total += median(onednn);
      bf16_total += median(bf16);
      f16_total += median(f16);
      std::printf("| %lld | %s | %lld x %lld x %lld | %.1f | %.1f | %.1f | %.1f | %.2fx | %.2fx |\n",
                  static_cast<long long>(batch), shape.role, static_cast<long long>(shape.m),
                  static_cast<long long>(shape.n), static_cast<long long>(shape.k), flops / median(openblas) / 1e9,
                  flops / median(onednn) / 1e9, flops / median(bf16) / 1e9, flops / median(f16) / 1e9,
                  f32 / median(bf16), f32 / median(f16));
    }
    std::printf("| %lld | **all five (FLOP-weighted)** | | %.1f | %.1f | %.1f | %.1f | %.2fx | %.2fx |\n",
                static_cast<long long>(batch), flops_total / openblas_total / 1e9, flops_total / onednn_total / 1e9,
                flops_total / bf16_total / 1e9, flops_total / f16_total / 1e9, f32_total / bf16_total,
                f32_total / f16_total);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tp_kernel_bench: op-layer GEMM overhead over BLAS, and staged copy bandwidth over memcpy"};
  int rounds = 7;
  double seconds = 0.2;
  app.add_option("--rounds", rounds, "alternating rounds per pair (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "minimum seconds per timed measurement")->check(CLI::PositiveNumber);
  bool sgemm_rate_only = false;
  app.add_flag("--sgemm-rate", sgemm_rate_only,
               "print only one JSON line: the single-threaded raw cblas_sgemm rate over the MLP training GEMMs "
               "at batch 32 and 128 (FLOP-weighted, median of --rounds), the roofline input of "
               "bench/peers/compare_peers.py");
  std::string library = "openblas";
  app.add_option("--library", library, "--sgemm-rate: the library timed, openblas (cblas_sgemm) or onednn (dnnl_sgemm)")
      ->capture_default_str()
      ->check(CLI::IsMember({"openblas", "onednn"}));
  bool half_gemm_only = false;
  app.add_flag("--half-gemm", half_gemm_only,
               "print only the 16-bit GEMMs of mixed precision (bfloat16, float16) against float32 sgemm on the MLP "
               "training shapes, one thread");
  std::vector<std::int64_t> batches{32, 128};
  app.add_option("--batches", batches,
                 "--half-gemm: the batch sizes whose shapes are timed (a mirrored replica's is half the global one)")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (sgemm_rate_only) return sgemm_rate(rounds, seconds, library);
  if (half_gemm_only) return half_gemm(rounds, seconds, batches);

  tp::memory::MemoryConfig config;
  config.policy = tp::memory::GrowthPolicy::grow;
  config.limit_bytes = 1 * tp::kGiB;
  config.device = "sim:0";
  auto sim = tp::device::make_sim_device({tp::device::DeviceKind::sim, 0}, {tp::device::DeviceKind::sim, 0},
                                         1 * tp::kGiB, config, {});
  config.device = "cpu:0";
  auto cpu = tp::device::make_cpu_device({tp::device::DeviceKind::cpu, 0}, {tp::device::DeviceKind::cpu, 0},
                                         1 * tp::kGiB, config, {});

  const std::vector<GemmCase> shapes = {
      {"forward dense 1 (b=32)", 32, 512, 784, false, false}, {"forward dense 1", 128, 512, 784, false, false},
      {"forward dense 2", 128, 10, 512, false, false},        {"grad kernel 1 (x^T dy)", 784, 512, 128, true, false},
      {"grad kernel 2 (h^T dy)", 512, 10, 128, true, false},  {"grad input 2 (dy W^T)", 128, 512, 10, false, true},
  };
  std::printf(
      "GEMM, float32: GFLOP/s of ops::matmul_into (ours, bursts of 16 ops then one wait) and raw cblas_sgemm, medians "
      "of %d rounds\n\n",
      rounds);
  std::printf(
      "| device | role | m x n x k | ours GFLOP/s | BLAS GFLOP/s | overhead | overhead, sync each op |\n"
      "|---|---|---|---:|---:|---:|---:|\n");
  for (tp::device::Device* device : {sim.get(), cpu.get()}) {
    for (const GemmCase& shape : shapes) bench_gemm(*device, shape, rounds, seconds);
  }
  std::printf(
      "\nHost-to-device copy: GB/s of Device::copy_from_host + synchronize and of one memcpy, medians of %d"
      " rounds\n\n",
      rounds);
  std::printf("| device | size | ours GB/s | memcpy GB/s | ours/memcpy |\n|---|---:|---:|---:|---:|\n");
  for (std::size_t bytes : {64 * tp::kKiB, 1 * tp::kMiB, 16 * tp::kMiB, 64 * tp::kMiB})
    bench_copy(*sim, bytes, rounds, seconds);
  return 0;
}

// tp_kernel_bench: what our op layer costs over the BLAS it calls, and what a staged host-to-sim copy costs
// over a plain memcpy. Each pair is measured side by side, alternating ours and the baseline round by round,
// and reported as medians of the rounds (the machines are shared and noisy).
//
//   GEMM: ops::matmul_into on a device (validation, a task on the device's stream, the wait) against the
//   raw cblas_sgemm on host buffers of the same shapes; overhead = ours / raw - 1.
//   Copy: Device::copy_from_host + stream synchronize into a sim device (staged through pinned memory) against
//   one memcpy of the same size between host buffers.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/ops/init.hpp"
#include "tensorpool/ops/linalg.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Seconds per call of `body`, timed over enough calls to last about `seconds`.
double time_per_call(const std::function<void()>& body, double seconds) {
  body();  // warm up
  std::size_t calls = 1;
  for (;;) {
    const auto start = Clock::now();
    for (std::size_t call = 0; call < calls; ++call) body();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (elapsed >= seconds || calls >= (std::size_t{1} << 24)) return elapsed / static_cast<double>(calls);
    calls =
        std::max(calls * 2, static_cast<std::size_t>(static_cast<double>(calls) * seconds / std::max(elapsed, 1e-9)));
  }
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

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

struct GemmCase {
  const char* role;
  std::int64_t m, n, k;
  bool transpose_a, transpose_b;
};

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
  std::vector<float> host_a(static_cast<std::size_t>(shape.m * shape.k), 0.5F);
  std::vector<float> host_b(static_cast<std::size_t>(shape.k * shape.n), 0.25F);
  std::vector<float> host_c(static_cast<std::size_t>(shape.m * shape.n));
  const auto lda = static_cast<int>(shape.transpose_a ? shape.m : shape.k);
  const auto ldb = static_cast<int>(shape.transpose_b ? shape.k : shape.n);
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
    for (int call = 0; call < burst; ++call) {
      cblas_sgemm(CblasRowMajor, shape.transpose_a ? CblasTrans : CblasNoTrans,
                  shape.transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(shape.m), static_cast<int>(shape.n),
                  static_cast<int>(shape.k), 1.0F, host_a.data(), lda, host_b.data(), ldb, 0.0F, host_c.data(),
                  static_cast<int>(shape.n));
    }
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tp_kernel_bench: op-layer GEMM overhead over BLAS, and staged copy bandwidth over memcpy"};
  int rounds = 7;
  double seconds = 0.2;
  app.add_option("--rounds", rounds, "alternating rounds per pair (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "minimum seconds per timed measurement")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

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

// SPDX-License-Identifier: Apache-2.0
// tp_intra_op_bench: one training step's kernels on two threads, ours against OpenBLAS's own threading.
//
//   GEMM: backend::cpu::matmul with set_intra_op_threads(N) (blocks of C's rows or columns, one
//   single-threaded OpenBLAS call each) against the raw cblas_sgemm with openblas_set_num_threads(N), on the
//   five GEMMs of the 784-512-10 MLP's step at batch 32 and 128.
//   Adam: backend::cpu::adam_update over the model's 784x512 kernel with N intra-op threads against one thread
//   (OpenBLAS has no element-wise kernels: without the pool they run on the calling thread).
//
// Each pair alternates round by round; medians of the rounds (the machines are shared and noisy). Prints a
// Markdown table.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/gemm.hpp"
#include "backend/cpu/kernels/optimizer.hpp"
#include "support/mlp_gemms.hpp"
#include "support/timing.hpp"

namespace {

using tp::backend::cpu::Transpose;
using tp::bench::gemm_operands;
using tp::bench::GemmCase;
using tp::bench::median;
using tp::bench::raw_sgemm;
using tp::bench::time_per_call;
using tp::bench::training_gemms;

void print_row(const char* batch, const char* role, const char* shape, double openblas, double ours) {
  std::printf("| %s | %s | %s | %.1f | %.1f | %.2fx |\n", batch, role, shape, openblas * 1e6, ours * 1e6,
              openblas / ours);
}

void bench_gemms(int threads, int rounds, double seconds) {
  for (std::int64_t batch : {32, 128}) {
    double openblas_total = 0, ours_total = 0;
    for (const GemmCase& shape : training_gemms(batch)) {
      auto [a, b, c] = gemm_operands(shape);
      std::vector<double> openblas, ours;
      for (int round = 0; round < rounds; ++round) {
        tp::backend::cpu::set_intra_op_threads(1);  // the pool idle, the BLAS single-threaded...
        openblas_set_num_threads(threads);          // ...then OpenBLAS's own threads
        openblas.push_back(time_per_call([&] { raw_sgemm(shape, a.data(), b.data(), c.data()); }, seconds));
        tp::backend::cpu::set_intra_op_threads(threads);
        ours.push_back(time_per_call(
            [&] {
              tp::backend::cpu::matmul<float>(shape.transpose_a ? Transpose::yes : Transpose::no,
                                              shape.transpose_b ? Transpose::yes : Transpose::no, shape.m, shape.n,
                                              shape.k, 1.0F, a.data(), b.data(), 0.0F, c.data());
            },
            seconds));
      }
      openblas_total += median(openblas);
      ours_total += median(ours);
      char batch_text[16], shape_text[64];
      std::snprintf(batch_text, sizeof batch_text, "%lld", static_cast<long long>(batch));
      std::snprintf(shape_text, sizeof shape_text, "%lld x %lld x %lld", static_cast<long long>(shape.m),
                    static_cast<long long>(shape.n), static_cast<long long>(shape.k));
      print_row(batch_text, shape.role, shape_text, median(openblas), median(ours));
    }
    char batch_text[16];
    std::snprintf(batch_text, sizeof batch_text, "%lld", static_cast<long long>(batch));
    print_row(batch_text, "**the step's five GEMMs**", "", openblas_total, ours_total);
  }
}

void bench_adam(int threads, int rounds, double seconds) {
  constexpr std::int64_t kParameters = 784 * 512;
  std::vector<float> param(kParameters, 0.5F), grad(kParameters), m(kParameters, 0.0F), v(kParameters, 0.0F);
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(i % 29) * 0.01F - 0.14F;
  std::vector<double> one, many;
  auto update = [&] {
    tp::backend::cpu::adam_update<float>(param.data(), grad.data(), m.data(), v.data(), kParameters, 1e-3F, 0.9F,
                                         0.999F, 1e-7F, 10);
  };
  for (int round = 0; round < rounds; ++round) {
    tp::backend::cpu::set_intra_op_threads(1);
    one.push_back(time_per_call(update, seconds));
    tp::backend::cpu::set_intra_op_threads(threads);
    many.push_back(time_per_call(update, seconds));
  }
  print_row("-", "Adam, 784x512 kernel (one thread / pool)", "401,408 parameters", median(one), median(many));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tp_intra_op_bench: a training step's kernels on N threads, ours against OpenBLAS's threading"};
  int threads = 2;
  int rounds = 7;
  double seconds = 0.2;
  app.add_option("--threads", threads, "threads (intra-op, and OpenBLAS's for the baseline)")->check(CLI::Range(2, 64));
  app.add_option("--rounds", rounds, "alternating rounds per pair (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "minimum seconds per timed measurement")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  std::printf("%d threads, microseconds per call, medians of %d alternating rounds\n\n", threads, rounds);
  std::printf("| batch | kernel | m x n x k | OpenBLAS threads | intra-op pool | speed-up |\n");
  std::printf("|---:|---|---|---:|---:|---:|\n");
  bench_gemms(threads, rounds, seconds);
  bench_adam(threads, rounds, seconds);
  return 0;
}

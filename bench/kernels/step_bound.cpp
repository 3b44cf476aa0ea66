// SPDX-License-Identifier: Apache-2.0
// tp_step_bound: how fast the main job's training step can run on this CPU without a runtime, the bound the
// one-device figure of issue 22 is measured against.
//
// One Adam training step of the 784-512-10 MLP (ReLU, softmax cross-entropy), written out as a fixed schedule
// over --threads threads that meet at spin barriers: the same kernels `tensorpool train` runs (one raw sgemm
// per thread and product, by default from the library that computes that product's share faster here, as a
// device's GEMM library "auto" chooses; the CPU backend's bias, ReLU, cross-entropy and Adam loops),
// the same split (the forward product split along its depth, so that a thread's share of the layer-1 weight
// is the rows it computes the gradient of and updates), and nothing else: no graph, no streams, no intra-op
// pool hand-offs, no host thread, no allocation. With --input gather each step first assembles its batch as
// the input pipeline does (examples gathered in a shuffled order from a uint8 dataset of Fashion-MNIST's
// size, divided by 255) and copies it to the step's input, as a sim device's host-to-device copy does; with
// --input none the batch is fixed. Every thread takes an equal share of each part. With --epilogues fused the
// element-wise passes around layer 1 are fused as a graph compiler would (the partial sums, bias and ReLU in
// one pass; ReLU's gradient and the bias gradient's sums over the thread's own rows in another), which
// `tensorpool train` does not do: the figure is what those fusions are worth, not ours without a runtime.
//
// Prints one JSON line: samples/s (median of --repeats timed runs of --steps steps), the libraries chosen, the
// two-core roofline (threads x the faster library's one-thread sgemm rate on the step's five products at this
// batch, over 1,636,352 FLOP per sample) and the fraction reached, the mean time per step of each part on
// thread 0, and a check that the step computes what it should (its gradients against a plain one-thread
// computation of the same step; the program exits 1 when they disagree).
#include <cblas.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/activations.hpp"
#include "backend/cpu/kernels/bias.hpp"
#include "backend/cpu/kernels/cross_entropy.hpp"
#include "backend/cpu/kernels/elementwise.hpp"
#include "backend/cpu/kernels/optimizer.hpp"
#include "core/isa_clones.hpp"
#include "support/mlp_gemms.hpp"
#include "support/timing.hpp"
#include "tensorpool/core/convert.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace cpu = tp::backend::cpu;

constexpr std::int64_t kInputs = 784;
constexpr std::int64_t kHidden = 512;
constexpr std::int64_t kClasses = 10;
constexpr std::int64_t kExamples = 60000;  // Fashion-MNIST's training set
constexpr float kLearningRate = 1e-3F;

enum Part { kGather, kForward1, kForward2, kBackward2, kBackward1, kParts };
// The step's products, each timed with both libraries under --library auto.
enum Product { kLayer1, kLayer2, kInputGrad2, kWeightGrad2, kWeightGrad1, kProducts };
constexpr std::array<const char*, kProducts> kProductNames = {"x w1", "h w2", "dy w2^T", "h^T dy", "x^T dh"};
constexpr std::array<const char*, kParts> kPartNames = {"gather", "forward 1", "forward 2 and loss", "backward 2",
                                                        "backward 1 and Adam"};

// A spin barrier counting generations: the threads each have a core, so a waiter spins instead of paying a wake-up.
class SpinBarrier {
 public:
  static constexpr int kPollsBeforeYield = 4096;
  explicit SpinBarrier(int threads) : threads_(threads) {}
  void wait() {
    const unsigned generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == threads_ - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    // Past a bound of polls, each poll yields: on a machine busy with other work the thread that has not
    // arrived may be waiting for this core.
    for (int polls = 0; generation_.load(std::memory_order_acquire) == generation; ++polls) {
      if (polls < kPollsBeforeYield) {
#if defined(__x86_64__)
        _mm_pause();
#endif
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  const int threads_;
  std::atomic<int> arrived_{0};
  std::atomic<unsigned> generation_{0};
};

// [begin, end) of part `index` of `count` equal parts of `n` (the last takes the remainder).
struct Range {
  std::int64_t begin, end;
  std::int64_t size() const { return end - begin; }
};
Range share(std::int64_t n, int index, int count) {
  const std::int64_t each = n / count;
  return {each * index, index == count - 1 ? n : each * (index + 1)};
}

struct Model {
  std::vector<float> w1, b1, w2, b2;                                  // parameters
  std::vector<float> m_w1, v_w1, m_b1, v_b1, m_w2, v_w2, m_b2, v_b2;  // Adam's state
};

struct Step {
  std::int64_t batch = 0;
  int threads = 1;
  std::array<bool, kProducts> onednn{};  // per product: oneDNN, else OpenBLAS
  bool gather = false;
  bool fused = false;  // --epilogues fused
  // The input pipeline's data: uint8 examples, their labels, a shuffled order.
  std::vector<std::uint8_t> dataset;
  std::vector<std::int32_t> dataset_labels;
  std::vector<std::int64_t> order;
  // Activations and gradients.
  std::vector<float> staging, x, hidden, logits, loss, dlogits, dhidden, dw1, db1, dw2, db2;
  std::vector<std::int32_t> labels;
  std::vector<std::vector<float>> partial;       // per thread: its depth share of the layer-1 product
  std::vector<std::vector<float>> bias_partial;  // per thread, fused: bias 1's gradient over the thread's rows
  Model model;
};

std::vector<float> uniform(std::size_t n, float bound, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> values(n);
  for (float& value : values) value = dist(rng);
  return values;
}

Step make_step(std::int64_t batch, int threads, const std::array<bool, kProducts>& onednn, bool gather, bool fused) {
  Step step;
  step.batch = batch;
  step.threads = threads;
  step.onednn = onednn;
  step.gather = gather;
  step.fused = fused;
  std::mt19937 rng(1);
  const auto u = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  step.model.w1 = uniform(u(kInputs * kHidden), std::sqrt(6.0F / (kInputs + kHidden)), rng);
  step.model.w2 = uniform(u(kHidden * kClasses), std::sqrt(6.0F / (kHidden + kClasses)), rng);
  step.model.b1.assign(u(kHidden), 0.0F);
  step.model.b2.assign(u(kClasses), 0.0F);
  for (auto* state : {&step.model.m_w1, &step.model.v_w1}) state->assign(u(kInputs * kHidden), 0.0F);
  for (auto* state : {&step.model.m_b1, &step.model.v_b1}) state->assign(u(kHidden), 0.0F);
  for (auto* state : {&step.model.m_w2, &step.model.v_w2}) state->assign(u(kHidden * kClasses), 0.0F);
  for (auto* state : {&step.model.m_b2, &step.model.v_b2}) state->assign(u(kClasses), 0.0F);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<std::int32_t> label(0, kClasses - 1);
  if (gather) {
    step.dataset.resize(u(kExamples * kInputs));
    for (std::uint8_t& value : step.dataset) value = static_cast<std::uint8_t>(byte(rng));
    step.dataset_labels.resize(u(kExamples));
    for (std::int32_t& value : step.dataset_labels) value = label(rng);
    step.order.resize(u(kExamples));
    std::iota(step.order.begin(), step.order.end(), 0);
    std::shuffle(step.order.begin(), step.order.end(), rng);
    step.staging.resize(u(batch * kInputs));
  }
  step.x.resize(u(batch * kInputs));
  for (float& value : step.x) value = static_cast<float>(byte(rng)) / 255.0F;
  step.labels.resize(u(batch));
  for (std::int32_t& value : step.labels) value = label(rng);
  step.hidden.resize(u(batch * kHidden));
  step.dhidden.resize(u(batch * kHidden));
  step.logits.resize(u(batch * kClasses));
  step.dlogits.resize(u(batch * kClasses));
  step.loss.resize(u(batch));
  step.dw1.resize(u(kInputs * kHidden));
  step.db1.resize(u(kHidden));
  step.dw2.resize(u(kHidden * kClasses));
  step.db2.resize(u(kClasses));
  step.partial.assign(static_cast<std::size_t>(threads), std::vector<float>(u(batch * kHidden)));
  step.bias_partial.assign(static_cast<std::size_t>(threads), std::vector<float>(u(kHidden)));
  return step;
}

// Bias 1's gradient as the backend's reduce_sum computes it (columns in blocks, each summed over every row in
// double), over this thread's columns of the rows: reduce_sum itself takes only whole rows.
TP_ISA_CLONES void column_sums(const float* __restrict__ x, std::int64_t rows, std::int64_t stride, std::int64_t width,
                               float* __restrict__ out) {
  constexpr std::int64_t kBlock = 64;
  for (std::int64_t begin = 0; begin < width; begin += kBlock) {
    const std::int64_t block = std::min(kBlock, width - begin);
    std::array<double, kBlock> sums{};
    for (std::int64_t row = 0; row < rows; ++row) {
      const float* __restrict__ line = x + row * stride + begin;
      for (std::int64_t c = 0; c < block; ++c) sums[static_cast<std::size_t>(c)] += static_cast<double>(line[c]);
    }
    for (std::int64_t c = 0; c < block; ++c) out[begin + c] = static_cast<float>(sums[static_cast<std::size_t>(c)]);
  }
}

// --epilogues fused, forward: hidden = ReLU(sum of the threads' partial products + bias), one pass over the rows.
TP_ISA_CLONES void sum_bias_relu(const std::vector<std::vector<float>>& partials, std::int64_t first_row,
                                 std::int64_t rows, const float* __restrict__ bias, float* __restrict__ hidden) {
  for (std::int64_t row = 0; row < rows; ++row) {
    float* __restrict__ out = hidden + row * kHidden;
    const float* __restrict__ head = partials[0].data() + (first_row + row) * kHidden;
    for (std::int64_t c = 0; c < kHidden; ++c) out[c] = head[c];
    for (std::size_t other = 1; other < partials.size(); ++other) {
      const float* __restrict__ add = partials[other].data() + (first_row + row) * kHidden;
      for (std::int64_t c = 0; c < kHidden; ++c) out[c] += add[c];
    }
    for (std::int64_t c = 0; c < kHidden; ++c) out[c] = std::max(out[c] + bias[c], 0.0F);
  }
}

// --epilogues fused, backward: dhidden = dhidden where hidden > 0, else 0, and sums[c] = the sum of the result's
// column c over these rows (the bias gradient's share of this thread), while the rows are in this core's cache.
TP_ISA_CLONES void relu_grad_bias_sums(const float* __restrict__ hidden, float* __restrict__ dhidden, std::int64_t rows,
                                       float* __restrict__ sums) {
  for (std::int64_t c = 0; c < kHidden; ++c) sums[c] = 0.0F;
  for (std::int64_t row = 0; row < rows; ++row) {
    const float* __restrict__ h = hidden + row * kHidden;
    float* __restrict__ d = dhidden + row * kHidden;
    for (std::int64_t c = 0; c < kHidden; ++c) {
      d[c] = h[c] > 0.0F ? d[c] : 0.0F;
      sums[c] += d[c];
    }
  }
}

// Thread `t`'s share of step `index` (the model's `adam_step`-th update); parts[] gets thread 0's seconds per
// part.
void run_share(Step& s, int t, std::int64_t index, std::int64_t adam_step, SpinBarrier& barrier,
               std::array<double, kParts>* parts) {
  const std::int64_t batch = s.batch;
  const Range rows = share(batch, t, s.threads);       // batch rows: gather, element-wise, layer 2
  const Range depth = share(kInputs, t, s.threads);    // layer-1 weight rows: forward depth, gradient, Adam
  const Range columns = share(kHidden, t, s.threads);  // hidden units: bias 1 and layer-2 weight rows
  Model& model = s.model;
  auto stamp = Clock::now();
  const auto lap = [&](Part part) {
    if (parts == nullptr) return;
    const auto now = Clock::now();
    (*parts)[part] += std::chrono::duration<double>(now - stamp).count();
    stamp = now;
  };
  if (s.gather) {
    const std::size_t elements = kInputs;
    for (std::int64_t row = rows.begin; row < rows.end; ++row) {
      const auto slot = static_cast<std::size_t>((index * batch + row) % kExamples);
      const std::int64_t example = s.order[slot];
      if (row + 1 < rows.end) {
        const std::uint8_t* next = s.dataset.data() + s.order[(slot + 1) % kExamples] * kInputs;
        for (std::int64_t line = 0; line < kInputs; line += 64) __builtin_prefetch(next + line);
      }
      tp::u8_to_f32_divided(s.dataset.data() + example * kInputs, 255.0F,
                            s.staging.data() + static_cast<std::size_t>(row) * elements, kInputs);
      s.labels[static_cast<std::size_t>(row)] = s.dataset_labels[static_cast<std::size_t>(example)];
    }
    // The host-to-device copy of a sim device.
    std::memcpy(s.x.data() + rows.begin * kInputs, s.staging.data() + rows.begin * kInputs,
                static_cast<std::size_t>(rows.size() * kInputs) * sizeof(float));
    barrier.wait();
    lap(kGather);
  }
  // Layer 1 forward: this thread's depth share of x w1, summed by rows below.
  tp::bench::strided_sgemm(s.onednn[kLayer1], false, false, batch, kHidden, depth.size(), s.x.data() + depth.begin,
                           kInputs, model.w1.data() + depth.begin * kHidden, kHidden,
                           s.partial[static_cast<std::size_t>(t)].data(), kHidden);
  barrier.wait();
  lap(kForward1);
  // Rows: the partial sums, bias, ReLU; layer 2 and the loss's gradient (the mean over the batch).
  float* hidden = s.hidden.data() + rows.begin * kHidden;
  const std::int64_t hidden_elements = rows.size() * kHidden;
  if (s.fused) {
    sum_bias_relu(s.partial, rows.begin, rows.size(), model.b1.data(), hidden);
  } else {
    std::memcpy(hidden, s.partial[0].data() + rows.begin * kHidden, static_cast<std::size_t>(hidden_elements) * 4);
    for (int other = 1; other < s.threads; ++other)
      cpu::add(hidden, s.partial[static_cast<std::size_t>(other)].data() + rows.begin * kHidden, hidden,
               hidden_elements);
    cpu::bias_add(hidden, model.b1.data(), hidden, rows.size(), kHidden);
    cpu::relu(hidden, hidden, hidden_elements);
  }
  float* logits = s.logits.data() + rows.begin * kClasses;
  float* dlogits = s.dlogits.data() + rows.begin * kClasses;
  tp::bench::strided_sgemm(s.onednn[kLayer2], false, false, rows.size(), kClasses, kHidden, hidden, kHidden,
                           model.w2.data(), kClasses, logits, kClasses);
  cpu::bias_add(logits, model.b2.data(), logits, rows.size(), kClasses);
  cpu::sparse_softmax_cross_entropy(logits, s.labels.data() + rows.begin, s.loss.data() + rows.begin, dlogits,
                                    rows.size(), kClasses);
  const float inverse_batch = 1.0F / static_cast<float>(batch);
  for (std::int64_t i = 0; i < rows.size() * kClasses; ++i) dlogits[i] *= inverse_batch;
  // Layer 2's input gradient through the ReLU.
  float* dhidden = s.dhidden.data() + rows.begin * kHidden;
  tp::bench::strided_sgemm(s.onednn[kInputGrad2], false, true, rows.size(), kHidden, kClasses, dlogits, kClasses,
                           model.w2.data(), kClasses, dhidden, kHidden);
  if (s.fused) {
    relu_grad_bias_sums(hidden, dhidden, rows.size(), s.bias_partial[static_cast<std::size_t>(t)].data());
  } else {
    cpu::relu_grad(dhidden, hidden, dhidden, hidden_elements);
  }
  barrier.wait();
  lap(kForward2);
  // Columns: layer 2's weight gradient rows and bias 1's gradient; thread 0 also bias 2's.
  tp::bench::strided_sgemm(s.onednn[kWeightGrad2], true, false, columns.size(), kClasses, batch,
                           s.hidden.data() + columns.begin, kHidden, s.dlogits.data(), kClasses,
                           s.dw2.data() + columns.begin * kClasses, kClasses);
  if (s.fused) {
    std::fill(s.db1.begin() + columns.begin, s.db1.begin() + columns.end, 0.0F);
    for (const std::vector<float>& sums : s.bias_partial)
      for (std::int64_t c = columns.begin; c < columns.end; ++c)
        s.db1[static_cast<std::size_t>(c)] += sums[static_cast<std::size_t>(c)];
  } else {
    column_sums(s.dhidden.data() + columns.begin, batch, kHidden, columns.size(), s.db1.data() + columns.begin);
  }
  if (t == 0) cpu::bias_add_grad(s.dlogits.data(), s.db2.data(), batch, kClasses);
  lap(kBackward2);
  // Layer 1's weight gradient rows of this thread and their update, then the thread's share of the rest.
  tp::bench::strided_sgemm(s.onednn[kWeightGrad1], true, false, depth.size(), kHidden, batch, s.x.data() + depth.begin,
                           kInputs, s.dhidden.data(), kHidden, s.dw1.data() + depth.begin * kHidden, kHidden);
  const auto adam = cpu::adam_step<float>("step_bound", kLearningRate, 0.9F, 0.999F, 1e-7F, adam_step);
  const auto update = [&](std::vector<float>& param, const std::vector<float>& grad, std::vector<float>& m,
                          std::vector<float>& v, Range range, std::int64_t width) {
    const std::size_t at = static_cast<std::size_t>(range.begin * width);
    cpu::adam_apply(adam, param.data() + at, grad.data() + at, m.data() + at, v.data() + at, range.size() * width);
  };
  update(model.w1, s.dw1, model.m_w1, model.v_w1, depth, kHidden);
  update(model.b1, s.db1, model.m_b1, model.v_b1, columns, 1);
  update(model.w2, s.dw2, model.m_w2, model.v_w2, columns, kClasses);
  if (t == 0) update(model.b2, s.db2, model.m_b2, model.v_b2, {0, kClasses}, 1);
  barrier.wait();
  lap(kBackward1);
}

// Runs `steps` steps from batch `first` on s.threads threads, training the model from `initial` (a run that
// trained on and on would, with a fixed batch, drive the gradients into subnormal numbers that no training
// epoch sees); returns seconds and adds thread 0's parts.
double run_steps(Step& s, const Model& initial, std::int64_t first, std::int64_t steps,
                 std::array<double, kParts>& parts) {
  s.model = initial;
  SpinBarrier barrier(s.threads);
  const auto body = [&](int t) {
    for (std::int64_t index = first; index < first + steps; ++index)
      run_share(s, t, index, index - first + 1, barrier, t == 0 ? &parts : nullptr);
  };
  const auto start = Clock::now();
  std::vector<std::thread> helpers;
  for (int t = 1; t < s.threads; ++t) helpers.emplace_back(body, t);
  body(0);
  for (std::thread& helper : helpers) helper.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The step's gradients, computed plainly on one thread in double: the check of what the schedule computes.
bool check(std::int64_t batch, int threads, const std::array<bool, kProducts>& onednn, bool fused,
           std::string& detail) {
  Step s = make_step(batch, threads, onednn, false, fused);
  // Biases away from their zero start, so that a step which dropped one would disagree.
  std::mt19937 rng(2);
  s.model.b1 = uniform(static_cast<std::size_t>(kHidden), 0.1F, rng);
  s.model.b2 = uniform(static_cast<std::size_t>(kClasses), 0.1F, rng);
  const Model before = s.model;
  std::array<double, kParts> parts{};
  run_steps(s, before, 0, 1, parts);
  const auto at = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  std::vector<double> h(at(batch * kHidden)), dh(at(batch * kHidden)), dl(at(batch * kClasses));
  for (std::int64_t r = 0; r < batch; ++r) {
    for (std::int64_t c = 0; c < kHidden; ++c) {
      double z = before.b1[at(c)];
      for (std::int64_t i = 0; i < kInputs; ++i) z += double{s.x[at(r * kInputs + i)]} * before.w1[at(i * kHidden + c)];
      h[at(r * kHidden + c)] = std::max(z, 0.0);
    }
    std::array<double, kClasses> z{};
    double largest = -1e300;
    for (std::int64_t o = 0; o < kClasses; ++o) {
      z[at(o)] = before.b2[at(o)];
      for (std::int64_t c = 0; c < kHidden; ++c) z[at(o)] += h[at(r * kHidden + c)] * before.w2[at(c * kClasses + o)];
      largest = std::max(largest, z[at(o)]);
    }
    double total = 0;
    for (double& value : z) total += (value = std::exp(value - largest));
    for (std::int64_t o = 0; o < kClasses; ++o)
      dl[at(r * kClasses + o)] = (z[at(o)] / total - (o == s.labels[at(r)] ? 1.0 : 0.0)) / static_cast<double>(batch);
    for (std::int64_t c = 0; c < kHidden; ++c) {
      double g = 0;
      for (std::int64_t o = 0; o < kClasses; ++o) g += dl[at(r * kClasses + o)] * before.w2[at(c * kClasses + o)];
      dh[at(r * kHidden + c)] = h[at(r * kHidden + c)] > 0 ? g : 0.0;
    }
  }
  double worst = 0, scale = 0;
  const auto compare = [&](float got, double want) {
    worst = std::max(worst, std::abs(double{got} - want));
    scale = std::max(scale, std::abs(want));
  };
  for (std::int64_t i = 0; i < kInputs; i += 7) {
    for (std::int64_t c = 0; c < kHidden; c += 5) {
      double g = 0;
      for (std::int64_t r = 0; r < batch; ++r) g += double{s.x[at(r * kInputs + i)]} * dh[at(r * kHidden + c)];
      compare(s.dw1[at(i * kHidden + c)], g);
    }
  }
  for (std::int64_t c = 0; c < kHidden; ++c) {
    double g = 0;
    for (std::int64_t r = 0; r < batch; ++r) g += dh[at(r * kHidden + c)];
    compare(s.db1[at(c)], g);
    for (std::int64_t o = 0; o < kClasses; ++o) {
      double w = 0;
      for (std::int64_t r = 0; r < batch; ++r) w += h[at(r * kHidden + c)] * dl[at(r * kClasses + o)];
      compare(s.dw2[at(c * kClasses + o)], w);
    }
  }
  const bool moved = s.model.w1 != before.w1 && s.model.w2 != before.w2;
  const bool close = worst <= 1e-4 * std::max(scale, 1e-3);
  char line[160];
  std::snprintf(line, sizeof line, "largest gradient difference %.3g against a largest gradient %.3g%s", worst, scale,
                moved ? "" : "; the update left the weights unchanged");
  detail = line;
  return close && moved;
}

// Per product, whether oneDNN computes a thread's share of it faster than OpenBLAS (the shares' shapes,
// contiguous operands, one thread): what a device's GEMM library "auto" decides per shape class.
std::array<bool, kProducts> faster_libraries(std::int64_t batch, int threads) {
  const std::int64_t rows = batch / threads;
  const std::int64_t depth = kInputs / threads;
  const std::int64_t columns = kHidden / threads;
  const std::array<tp::bench::GemmCase, kProducts> shares = {{
      {kProductNames[kLayer1], batch, kHidden, depth, false, false},
      {kProductNames[kLayer2], rows, kClasses, kHidden, false, false},
      {kProductNames[kInputGrad2], rows, kHidden, kClasses, false, true},
      {kProductNames[kWeightGrad2], columns, kClasses, batch, true, false},
      {kProductNames[kWeightGrad1], depth, kHidden, batch, true, false},
  }};
  std::array<bool, kProducts> onednn{};
  for (std::size_t product = 0; product < kProducts; ++product) {
    const tp::bench::GemmCase& shape = shares[product];
    tp::bench::GemmOperands operands = tp::bench::gemm_operands(shape);
    const auto time = [&](bool library) {
      return tp::bench::time_per_call(
          [&] { tp::bench::contiguous_sgemm(library, shape, operands.a.data(), operands.b.data(), operands.c.data()); },
          0.02);
    };
    onednn[product] = time(true) < time(false);
  }
  return onednn;
}

// The library's one-thread rate on the step's five products at this batch (tp_kernel_bench --sgemm-rate's
// measurement), GFLOP/s.
double one_thread_rate(std::int64_t batch, bool onednn, int rounds) {
  std::vector<double> rates;
  for (int round = 0; round < rounds; ++round) {
    double flops = 0, seconds = 0;
    for (const tp::bench::GemmCase& shape : tp::bench::training_gemms(batch)) {
      tp::bench::GemmOperands operands = tp::bench::gemm_operands(shape);
      seconds += tp::bench::time_per_call(
          [&] { tp::bench::contiguous_sgemm(onednn, shape, operands.a.data(), operands.b.data(), operands.c.data()); },
          0.05);
      flops += 2.0 * static_cast<double>(shape.m * shape.n * shape.k);
    }
    rates.push_back(flops / seconds / 1e9);
  }
  return tp::bench::median(rates);
}

}  // namespace

static int run(int argc, char** argv) {
  CLI::App app{"tp_step_bound: the main job's training step as a fixed schedule of its kernels, no runtime"};
  std::int64_t batch = 128;
  int threads = 2;
  std::int64_t steps = 200;
  int repeats = 5;
  std::string library = "auto";
  std::string input = "gather";
  std::string epilogues = "separate";
  app.add_option("--batch-size", batch, "examples per step")->check(CLI::Range(std::int64_t{2}, std::int64_t{8192}));
  app.add_option("--threads", threads, "threads sharing each step (the roofline counts one core each)")
      ->check(CLI::Range(1, 64));
  app.add_option("--steps", steps, "timed steps per run, each run from the same initial model")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  app.add_option("--repeats", repeats, "timed runs (the figure is their median)")->check(CLI::Range(1, 1000));
  app.add_option("--library", library,
                 "the GEMM library: auto (per product, the faster on this machine), onednn (dnnl_sgemm) or openblas "
                 "(cblas_sgemm)")
      ->check(CLI::IsMember({"auto", "onednn", "openblas"}));
  app.add_option("--input", input,
                 "gather: each step assembles its batch from a shuffled uint8 dataset and copies it in, as the input "
                 "pipeline and a sim device do; none: a fixed batch")
      ->check(CLI::IsMember({"gather", "none"}));
  app.add_option("--epilogues", epilogues,
                 "separate: layer 1's bias, ReLU and their gradients as the backend's separate loops, as tensorpool "
                 "train runs them; fused: in two passes over each thread's own rows, as a fusing compiler would")
      ->check(CLI::IsMember({"separate", "fused"}));
  CLI11_PARSE(app, argc, argv);
  if (batch < threads) {
    std::fprintf(stderr, "tp_step_bound: --batch-size %lld is smaller than --threads %d: give each thread a row\n",
                 static_cast<long long>(batch), threads);
    return 2;
  }
  openblas_set_num_threads(1);
  cpu::set_intra_op_threads(1);  // the backend's loops run on the thread that calls them
  std::array<bool, kProducts> onednn{};
  if (library == "auto") {
    onednn = faster_libraries(batch, threads);
  } else {
    onednn.fill(library == "onednn");
  }

  std::string detail;
  const bool correct = check(batch, threads, onednn, epilogues == "fused", detail);
  // The roofline's rate is the faster library's (issue 22's definition), whichever the products use.
  const double onednn_rate = one_thread_rate(batch, true, 3);
  const double openblas_rate = one_thread_rate(batch, false, 3);
  const double rate = std::max(onednn_rate, openblas_rate);
  double flops_per_sample = 0;
  for (const tp::bench::GemmCase& shape : tp::bench::training_gemms(1))
    flops_per_sample += 2.0 * static_cast<double>(shape.m * shape.n * shape.k);
  const double roofline = threads * rate * 1e9 / flops_per_sample;

  Step s = make_step(batch, threads, onednn, input == "gather", epilogues == "fused");
  const Model initial = s.model;
  std::array<double, kParts> parts{};
  run_steps(s, initial, 0, std::min<std::int64_t>(steps, 20), parts);  // warm-up: oneDNN's kernels, the caches
  std::vector<double> rates;
  parts = {};
  for (int repeat = 0; repeat < repeats; ++repeat) {
    const double seconds = run_steps(s, initial, static_cast<std::int64_t>(repeat + 1) * steps, steps, parts);
    rates.push_back(static_cast<double>(steps * batch) / seconds);
  }
  const double samples = tp::bench::median(rates);
  std::printf(
      "{\"batch\": %lld, \"threads\": %d, \"library\": \"%s\", \"input\": \"%s\", \"epilogues\": \"%s\", "
      "\"samples_per_s\": %.0f, ",
      static_cast<long long>(batch), threads, library.c_str(), input.c_str(), epilogues.c_str(), samples);
  std::printf("\"products\": {");
  for (std::size_t product = 0; product < kProducts; ++product)
    std::printf("%s\"%s\": \"%s\"", product ? ", " : "", kProductNames[product],
                onednn[product] ? "onednn" : "openblas");
  std::printf("}, ");
  std::printf("\"runs\": [");
  for (std::size_t i = 0; i < rates.size(); ++i) std::printf("%s%.0f", i ? ", " : "", rates[i]);
  std::printf(
      "], \"one_thread_sgemm_gflops\": {\"onednn\": %.1f, \"openblas\": %.1f}, \"roofline_samples_per_s\": %.0f, "
      "\"of_roofline\": %.3f, ",
      onednn_rate, openblas_rate, roofline, samples / roofline);
  std::printf("\"us_per_step\": {");
  const double timed_steps = static_cast<double>(steps) * repeats;
  bool first = true;
  for (std::size_t part = 0; part < kParts; ++part) {
    if (part == kGather && input != "gather") continue;
    std::printf("%s\"%s\": %.1f", first ? "" : ", ", kPartNames[part], parts[part] / timed_steps * 1e6);
    first = false;
  }
  std::printf("}, \"check\": \"%s\", \"check_detail\": \"%s\"}\n", correct ? "ok" : "failed", detail.c_str());
  return correct ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "tp_step_bound: %s\n", error.what());
    return 1;
  }
}

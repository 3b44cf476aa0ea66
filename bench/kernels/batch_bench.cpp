// SPDX-License-Identifier: Apache-2.0
// tp_batch_bench: the input pipeline's cost per batch, which the prefetch thread pays on a core the training
// step's threads share (two cores: the device's worker, the intra-op helper, the host and the prefetch).
//
//   ours:  tp::data::Dataset over Fashion-MNIST-shaped uint8 images (60,000 x 28 x 28, random pixels, random
//          labels), shuffled, normalize(), batch(B), one epoch read with next() on this thread (no prefetch
//          thread, so the time is the assembly's alone): gather each shuffled example, convert to float32 and
//          divide by 255.
//   table: the same gather done as the pipeline did before, through a 256-entry lookup table (table[v] =
//          v / 255, the same bits), one byte at a time, into a buffer of the batch's size.
//
// Rounds alternate ours and table; medians of the rounds, in microseconds per batch. Prints a Markdown table.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "support/timing.hpp"
#include "tensorpool/data/dataset.hpp"
#include "tensorpool/device/device_manager.hpp"

namespace {

constexpr std::int64_t kExamples = 60000;
constexpr std::int64_t kPixels = 28 * 28;

struct Images {
  std::vector<std::uint8_t> pixels;
  std::vector<std::int32_t> labels;
};

Images random_images() {
  Images images{std::vector<std::uint8_t>(kExamples * kPixels), std::vector<std::int32_t>(kExamples)};
  std::mt19937 random(7);
  for (std::uint8_t& pixel : images.pixels) pixel = static_cast<std::uint8_t>(random());
  for (std::int32_t& label : images.labels) label = static_cast<std::int32_t>(random() % 10);
  return images;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Seconds per batch of one epoch through the Dataset.
double ours_per_batch(const tp::data::Dataset& dataset, std::int64_t epoch) {
  tp::data::BatchIterator batches = dataset.epoch(epoch);
  std::int64_t count = 0;
  const auto start = Clock::now();
  while (batches.next()) ++count;
  return seconds_since(start) / static_cast<double>(count);
}

// Seconds per batch of the lookup-table gather over the same shuffled order.
double table_per_batch(const Images& images, const std::vector<std::int64_t>& order, std::int64_t batch,
                       std::vector<float>& out) {
  std::array<float, 256> table{};
  for (int value = 0; value < 256; ++value) table[static_cast<std::size_t>(value)] = static_cast<float>(value) / 255.0F;
  const std::int64_t batches = (kExamples + batch - 1) / batch;
  const auto start = Clock::now();
  for (std::int64_t first = 0; first < kExamples; first += batch) {
    for (std::int64_t k = 0; k < batch && first + k < kExamples; ++k) {
      const std::uint8_t* source = images.pixels.data() + order[static_cast<std::size_t>(first + k)] * kPixels;
      float* target = out.data() + k * kPixels;
      for (std::int64_t i = 0; i < kPixels; ++i) target[i] = table[source[i]];
    }
  }
  return seconds_since(start) / static_cast<double>(batches);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tp_batch_bench: the input pipeline's assembly cost per batch against a lookup-table gather"};
  int rounds = 7;
  std::vector<std::int64_t> batch_sizes{32, 128};
  app.add_option("--rounds", rounds, "alternating rounds (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--batch-sizes", batch_sizes, "batch sizes")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const Images images = random_images();
  tp::device::Device& cpu = tp::device::DeviceManager::instance().device("cpu:0");
  const tp::Tensor features = tp::Tensor::from_vector<std::uint8_t>(images.pixels, tp::Shape{kExamples, 28, 28}, cpu);
  const tp::Tensor labels = tp::Tensor::from_vector<std::int32_t>(images.labels, tp::Shape{kExamples}, cpu);
  std::vector<std::int64_t> order(kExamples);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(11));

  std::printf("| batch | ours, us per batch | lookup table, us per batch | table / ours |\n|---:|---:|---:|---:|\n");
  for (const std::int64_t batch : batch_sizes) {
    const tp::data::Dataset dataset =
        tp::data::Dataset::from_tensors(features, labels).shuffle(11).normalize().batch(batch);
    std::vector<float> out(static_cast<std::size_t>(batch * kPixels));
    std::vector<double> ours, table;
    for (int round = 0; round < rounds; ++round) {
      ours.push_back(ours_per_batch(dataset, round));
      table.push_back(table_per_batch(images, order, batch, out));
    }
    const double ours_us = tp::bench::median(ours) * 1e6;
    const double table_us = tp::bench::median(table) * 1e6;
    std::printf("| %lld | %.1f | %.1f | %.2fx |\n", static_cast<long long>(batch), ours_us, table_us,
                table_us / ours_us);
  }
  return 0;
}

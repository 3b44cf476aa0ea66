// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/init.hpp"

#include "ops/op_support.hpp"

namespace tp::ops {

void fill(const Tensor& out, double value, const OpContext& context) {
  device::Device& device = detail::common_device("Fill", {{"out", out}});
  detail::require_floating("Fill", {"out", out});
  device::Stream& stream = detail::stream_for("Fill", device, context);
  detail::kernel(device, &kernels::KernelTable::fill, "Fill")(stream, kernels::FillArgs{.out = out, .value = value});
}

void uniform(const Tensor& out, double low, double high, std::uint64_t seed, std::uint64_t offset,
             const OpContext& context) {
  device::Device& device = detail::common_device("Uniform", {{"out", out}});
  detail::require_floating("Uniform", {"out", out});
  if (!(low <= high)) TP_THROW(InvalidArgument, "ops", "Uniform: low ", low, " must not exceed high ", high);
  device::Stream& stream = detail::stream_for("Uniform", device, context);
  detail::kernel(device, &kernels::KernelTable::random, "Uniform")(
      stream, kernels::RandomArgs{.out = out,
                                  .distribution = kernels::Distribution::uniform,
                                  .a = low,
                                  .b = high,
                                  .seed = seed,
                                  .offset = offset});
}

void normal(const Tensor& out, double mean, double stddev, std::uint64_t seed, std::uint64_t offset,
            const OpContext& context) {
  device::Device& device = detail::common_device("Normal", {{"out", out}});
  detail::require_floating("Normal", {"out", out});
  if (!(stddev >= 0)) TP_THROW(InvalidArgument, "ops", "Normal: stddev ", stddev, " must be >= 0");
  device::Stream& stream = detail::stream_for("Normal", device, context);
  detail::kernel(device, &kernels::KernelTable::random, "Normal")(
      stream, kernels::RandomArgs{.out = out,
                                  .distribution = kernels::Distribution::normal,
                                  .a = mean,
                                  .b = stddev,
                                  .seed = seed,
                                  .offset = offset});
}

void glorot_uniform(const Tensor& out, std::uint64_t seed, const OpContext& context) {
  device::Device& device = detail::common_device("GlorotUniform", {{"out", out}});
  detail::require_floating("GlorotUniform", {"out", out});
  detail::require_rank("GlorotUniform", {"out", out}, 2);
  device::Stream& stream = detail::stream_for("GlorotUniform", device, context);
  detail::kernel(device, &kernels::KernelTable::random, "GlorotUniform")(
      stream, kernels::RandomArgs{.out = out,
                                  .distribution = kernels::Distribution::glorot_uniform,
                                  .a = 0,
                                  .b = 0,
                                  .seed = seed,
                                  .offset = 0});
}

}  // namespace tp::ops

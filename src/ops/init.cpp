#include "tensorpool/ops/init.hpp"

#include "backend/cpu/kernels/random.hpp"
#include "ops/op_support.hpp"

namespace tp::ops {

void fill(const Tensor& out, double value, const OpContext& context) {
  device::Device& device = detail::common_device("Fill", {{"out", out}});
  detail::require_floating("Fill", {"out", out});
  device::Stream& stream = detail::stream_for("Fill", device, context);
  detail::dispatch_floating(out.dtype(), [&]<typename T>(T) {
    stream.enqueue([out, value] { backend::cpu::fill<T>(out.data<T>(), out.num_elements(), static_cast<T>(value)); });
  });
}

void uniform(const Tensor& out, double low, double high, std::uint64_t seed, std::uint64_t offset,
             const OpContext& context) {
  device::Device& device = detail::common_device("Uniform", {{"out", out}});
  detail::require_floating("Uniform", {"out", out});
  if (!(low <= high)) TP_THROW(InvalidArgument, "ops", "Uniform: low ", low, " must not exceed high ", high);
  device::Stream& stream = detail::stream_for("Uniform", device, context);
  detail::dispatch_floating(out.dtype(), [&]<typename T>(T) {
    stream.enqueue([out, low, high, seed, offset] {
      backend::cpu::uniform<T>(out.data<T>(), out.num_elements(), static_cast<T>(low), static_cast<T>(high), seed,
                               offset);
    });
  });
}

void normal(const Tensor& out, double mean, double stddev, std::uint64_t seed, std::uint64_t offset,
            const OpContext& context) {
  device::Device& device = detail::common_device("Normal", {{"out", out}});
  detail::require_floating("Normal", {"out", out});
  if (!(stddev >= 0)) TP_THROW(InvalidArgument, "ops", "Normal: stddev ", stddev, " must be >= 0");
  device::Stream& stream = detail::stream_for("Normal", device, context);
  detail::dispatch_floating(out.dtype(), [&]<typename T>(T) {
    stream.enqueue([out, mean, stddev, seed, offset] {
      backend::cpu::normal<T>(out.data<T>(), out.num_elements(), static_cast<T>(mean), static_cast<T>(stddev), seed,
                              offset);
    });
  });
}

void glorot_uniform(const Tensor& out, std::uint64_t seed, const OpContext& context) {
  device::Device& device = detail::common_device("GlorotUniform", {{"out", out}});
  detail::require_floating("GlorotUniform", {"out", out});
  detail::require_rank("GlorotUniform", {"out", out}, 2);
  device::Stream& stream = detail::stream_for("GlorotUniform", device, context);
  detail::dispatch_floating(out.dtype(), [&]<typename T>(T) {
    stream.enqueue(
        [out, seed] { backend::cpu::glorot_uniform<T>(out.data<T>(), out.shape().dim(0), out.shape().dim(1), seed); });
  });
}

}  // namespace tp::ops

// SPDX-License-Identifier: Apache-2.0
// CorrectCount on backend/cpu/kernels/metrics.hpp (predictions float32 / float64, labels int32 / int64).
#include "backend/cpu/kernels/metrics.hpp"
#include "backend/cpu/ops/dispatch.hpp"
#include "backend/cpu/ops/op_kernels.hpp"

namespace tp::backend::cpu::op_kernels {

void correct_count(device::Stream& stream, const ops::kernels::CorrectCountArgs& args) {
  dispatch_floating(args.predictions.dtype(), [&]<typename T>(T) {
    stream.enqueue([predictions = args.predictions, labels = args.labels, out = args.out] {
      const std::int64_t rows = predictions.shape().dim(0);
      const std::int64_t cols = predictions.shape().dim(1);
      const std::int64_t count =
          labels.dtype() == DType::i32
              ? cpu::correct_count<T, std::int32_t>(predictions.data<T>(), labels.data<std::int32_t>(), rows, cols)
              : cpu::correct_count<T, std::int64_t>(predictions.data<T>(), labels.data<std::int64_t>(), rows, cols);
      *out.data<float>() = static_cast<float>(count);
    });
  });
}

}  // namespace tp::backend::cpu::op_kernels

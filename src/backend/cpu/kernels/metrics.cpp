// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/metrics.hpp"

#include <cmath>
#include <string_view>

#include "backend/cpu/kernels/check.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {

template <typename T, typename Label>
std::int64_t correct_count(const T* predictions, const Label* labels, std::int64_t rows, std::int64_t cols) {
  constexpr std::string_view kKernel = "correct_count";
  detail::check_size(kKernel, "rows", rows);
  detail::check_size(kKernel, "cols", cols);
  detail::check_pointer(kKernel, "predictions", predictions, detail::checked_product(kKernel, rows, cols));
  detail::check_pointer(kKernel, "labels", labels, rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto label = static_cast<std::int64_t>(labels[r]);
    if (label < 0 || label >= cols) {
      TP_THROW(InvalidArgument, detail::kComponent, kKernel, ": label ", label, " of row ", r, " is outside [0, ", cols,
               ")");
    }
  }
  std::int64_t correct = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* row = predictions + r * cols;
    std::int64_t best = 0;
    // Same rule as the argmax kernel: strictly greater takes over (ties keep the first), the first NaN wins.
    for (std::int64_t c = 1; c < cols && !std::isnan(row[best]); ++c) {
      if (row[c] > row[best] || std::isnan(row[c])) best = c;
    }
    if (best == static_cast<std::int64_t>(labels[r])) ++correct;
  }
  return correct;
}

#define TP_CPU_METRICS_DEFINE(T, Label) \
  template std::int64_t correct_count<T, Label>(const T*, const Label*, std::int64_t, std::int64_t);
TP_CPU_METRICS_DEFINE(float, std::int32_t)
TP_CPU_METRICS_DEFINE(float, std::int64_t)
TP_CPU_METRICS_DEFINE(double, std::int32_t)
TP_CPU_METRICS_DEFINE(double, std::int64_t)
#undef TP_CPU_METRICS_DEFINE

}  // namespace tp::backend::cpu

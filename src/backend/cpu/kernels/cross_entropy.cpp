// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/cross_entropy.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

#include "backend/cpu/intra_op_pool.hpp"
#include "backend/cpu/kernels/check.hpp"
#include "backend/cpu/kernels/softmax.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu {
namespace {

// Checks sizes, pointers and every label, before the kernel writes anything.
template <typename T, typename Label>
void check_batch(std::string_view kernel, const T* input, const Label* labels, const T* loss, std::int64_t rows,
                 std::int64_t cols) {
  detail::check_size(kernel, "rows", rows);
  detail::check_size(kernel, "cols", cols);
  detail::check_pointer(kernel, "input", input, detail::checked_product(kernel, rows, cols));
  detail::check_pointer(kernel, "labels", labels, rows);
  detail::check_pointer(kernel, "loss", loss, rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto label = static_cast<std::int64_t>(labels[r]);
    if (label < 0 || label >= cols) {
      TP_THROW(InvalidArgument, detail::kComponent, kernel, ": row ", r, " has label ", label,
               ", outside the valid class range [0, ", cols, ") for ", cols, " classes");
    }
  }
}

}  // namespace

template <typename T, typename Label>
void sparse_softmax_cross_entropy(const T* logits, const Label* labels, T* loss, T* dlogits, std::int64_t rows,
                                  std::int64_t cols) {
  check_batch("sparse_softmax_cross_entropy", logits, labels, loss, rows, cols);
  parallel_for(rows, detail::exp_rows_per_chunk(cols), [&](std::int64_t first_row, std::int64_t end_row) {
    std::array<double, detail::kCachedExpCols> exps{};
    const bool cached = dlogits != nullptr && cols <= detail::kCachedExpCols;
    for (std::int64_t r = first_row; r < end_row; ++r) {
      const T* row = logits + r * cols;
      const auto label = static_cast<std::int64_t>(labels[r]);
      const detail::RowShift shift = detail::row_shift(row, cols, cached ? exps.data() : nullptr);
      // logsumexp - x[label] = log(s) - (x[label] - m): the shifted form keeps full precision for large m.
      loss[r] = static_cast<T>(std::log(shift.sum_exp) - (static_cast<double>(row[label]) - shift.max));
      if (dlogits == nullptr) continue;
      T* grad = dlogits + r * cols;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double term =
            cached ? exps[static_cast<std::size_t>(c)] : std::exp(static_cast<double>(row[c]) - shift.max);
        const double probability = term / shift.sum_exp;
        grad[c] = static_cast<T>(c == label ? probability - 1.0 : probability);
      }
    }
  });
}

template <typename T, typename Label>
void sparse_categorical_cross_entropy_from_probs(const T* probs, const Label* labels, T* loss, T* dprobs,
                                                 std::int64_t rows, std::int64_t cols) {
  check_batch("sparse_categorical_cross_entropy_from_probs", probs, labels, loss, rows, cols);
  constexpr double kLow = kProbabilityEpsilon;
  constexpr double kHigh = 1.0 - kProbabilityEpsilon;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* row = probs + r * cols;
    const auto label = static_cast<std::int64_t>(labels[r]);
    double clipped_sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) clipped_sum += std::clamp(static_cast<double>(row[c]), kLow, kHigh);
    const auto probability = static_cast<double>(row[label]);
    loss[r] = static_cast<T>(std::log(clipped_sum) - std::log(std::clamp(probability, kLow, kHigh)));
    if (dprobs == nullptr) continue;
    T* grad = dprobs + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto value = static_cast<double>(row[c]);
      const bool inside = value >= kLow && value <= kHigh;
      grad[c] = inside ? static_cast<T>(1.0 / clipped_sum - (c == label ? 1.0 / value : 0.0)) : T{0};
    }
  }
}

#define TP_CPU_CROSS_ENTROPY_INSTANTIATE(T, Label)                                                                  \
  template void sparse_softmax_cross_entropy<T, Label>(const T*, const Label*, T*, T*, std::int64_t, std::int64_t); \
  template void sparse_categorical_cross_entropy_from_probs<T, Label>(const T*, const Label*, T*, T*, std::int64_t, \
                                                                      std::int64_t);
TP_CPU_CROSS_ENTROPY_INSTANTIATE(float, std::int32_t)
TP_CPU_CROSS_ENTROPY_INSTANTIATE(float, std::int64_t)
TP_CPU_CROSS_ENTROPY_INSTANTIATE(double, std::int32_t)
TP_CPU_CROSS_ENTROPY_INSTANTIATE(double, std::int64_t)

}  // namespace tp::backend::cpu

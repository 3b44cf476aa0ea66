// SPDX-License-Identifier: Apache-2.0
#pragma once
// Per-row sparse categorical cross-entropy of a row-major [rows, cols] batch with one integer class label per
// row (int32 or int64). Losses are per row; the caller reduces them (e.g. the mean over the batch) and scales
// the gradients to match (by 1 / rows for a mean).
//
// From logits (TensorFlow's sparse_softmax_cross_entropy_with_logits), computed in double per row:
//   loss[r]       = logsumexp(logits[r, :]) - logits[r, label[r]]       (stable: shifted by the row max)
//   dlogits[r, c] = softmax(logits[r, :])[c] - (c == label[r])          (d loss[r] / d logits[r, c])
//
// From probabilities, as Keras computes it (log of the clipped probabilities through a softmax
// cross-entropy), with c = clip(probs[r, :], eps, 1 - eps), eps = kProbabilityEpsilon = 1e-7 (Keras's backend
// epsilon) and S = sum of c over the row:
//   loss[r]       = log(S) - log(c[label[r]])      (= -log p[label] for rows that sum to 1, as softmax outputs)
//   dprobs[r, c]  = 1 / S - (c == label[r]) / p     where eps <= p <= 1 - eps, else 0 (the clip passes gradient
//                                                    only inside its range, as tf.clip_by_value)
//
// Every label must lie in [0, cols); all labels are checked before anything is written, and a bad one throws
// tp::InvalidArgument naming the row, the label value and the class count. So cols == 0 with rows > 0
// always throws. The gradient output may be nullptr (loss only). dlogits may alias logits, and dprobs probs
// (each row is read before it is overwritten); loss must not overlap the inputs.

#include <cstdint>

namespace tp::backend::cpu {

inline constexpr double kProbabilityEpsilon = 1e-7;

template <typename T, typename Label>
void sparse_softmax_cross_entropy(const T* logits, const Label* labels, T* loss, T* dlogits, std::int64_t rows,
                                  std::int64_t cols);

template <typename T, typename Label>
void sparse_categorical_cross_entropy_from_probs(const T* probs, const Label* labels, T* loss, T* dprobs,
                                                 std::int64_t rows, std::int64_t cols);

#define TP_CPU_CROSS_ENTROPY_DECLARE(T, Label)                                                               \
  extern template void sparse_softmax_cross_entropy<T, Label>(const T*, const Label*, T*, T*, std::int64_t,  \
                                                              std::int64_t);                                 \
  extern template void sparse_categorical_cross_entropy_from_probs<T, Label>(const T*, const Label*, T*, T*, \
                                                                             std::int64_t, std::int64_t);
TP_CPU_CROSS_ENTROPY_DECLARE(float, std::int32_t)
TP_CPU_CROSS_ENTROPY_DECLARE(float, std::int64_t)
TP_CPU_CROSS_ENTROPY_DECLARE(double, std::int32_t)
TP_CPU_CROSS_ENTROPY_DECLARE(double, std::int64_t)
#undef TP_CPU_CROSS_ENTROPY_DECLARE

}  // namespace tp::backend::cpu

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The neural-network ops of the MLP path: bias add, relu, softmax, log-softmax and the fused, numerically
// stable sparse softmax cross-entropy (from logits) or categorical cross-entropy from probabilities (clipped
// to [1e-7, 1 - 1e-7] as Keras), each with its gradient. Floating dtypes f32 and f64.

#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

// y[r, c] = x[r, c] + bias[c]; x is [rows, cols], bias is [cols].
void bias_add_into(const Tensor& x, const Tensor& bias, const Tensor& out, const OpContext& context = {});
[[nodiscard]] Tensor bias_add(const Tensor& x, const Tensor& bias, const OpContext& context = {});
// dbias[c] = sum over rows of dy[r, c].
void bias_add_grad_into(const Tensor& dy, const Tensor& dbias, const OpContext& context = {});
[[nodiscard]] Tensor bias_add_grad(const Tensor& dy, const OpContext& context = {});

void relu_into(const Tensor& x, const Tensor& out, const OpContext& context = {});
[[nodiscard]] Tensor relu(const Tensor& x, const OpContext& context = {});
// dx = dy where x > 0, else 0 (as TensorFlow).
void relu_grad_into(const Tensor& dy, const Tensor& x, const Tensor& dx, const OpContext& context = {});
[[nodiscard]] Tensor relu_grad(const Tensor& dy, const Tensor& x, const OpContext& context = {});

// Over the last axis of a rank-2 [rows, cols] tensor.
void softmax_into(const Tensor& x, const Tensor& out, const OpContext& context = {});
[[nodiscard]] Tensor softmax(const Tensor& x, const OpContext& context = {});
void log_softmax_into(const Tensor& x, const Tensor& out, const OpContext& context = {});
[[nodiscard]] Tensor log_softmax(const Tensor& x, const OpContext& context = {});

// Per-row loss [rows] and its gradient [rows, cols] with respect to the input (softmax - one_hot for logits);
// the caller scales by 1/batch for a mean. Labels: i32 or i64 [rows], each in [0, cols) (checked by the
// kernel: a bad label is a task error naming the row and value, reported at the next synchronization).
struct CrossEntropy {
  Tensor loss;
  Tensor gradient;
};
enum class CrossEntropyInput { logits, probabilities };
void sparse_cross_entropy_into(const Tensor& input, const Tensor& labels, const Tensor& loss, const Tensor& gradient,
                               CrossEntropyInput kind = CrossEntropyInput::logits, const OpContext& context = {});
[[nodiscard]] CrossEntropy sparse_cross_entropy(const Tensor& input, const Tensor& labels,
                                                CrossEntropyInput kind = CrossEntropyInput::logits,
                                                const OpContext& context = {});

}  // namespace tp::ops

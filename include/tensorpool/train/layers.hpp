// SPDX-License-Identifier: Apache-2.0
#pragma once
// Keras-like building blocks: Dense layers with an activation, optimizers with Keras defaults, losses.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "tensorpool/train/dtype_policy.hpp"

namespace tp::train {

enum class Activation { linear, relu, softmax };
// "linear", "relu", "softmax"; anything else throws tp::InvalidArgument naming it.
[[nodiscard]] Activation parse_activation(std::string_view text);
std::string_view to_string(Activation activation) noexcept;

// Dense(units, activation, use_bias): kernel Glorot-uniform, bias zeros, as Keras.
struct Dense {
  std::int64_t units = 0;
  Activation activation = Activation::linear;
  bool use_bias = true;
  std::string name{};                   // empty: "dense", "dense_1", ... in order, as Keras
  std::optional<DTypePolicy> policy{};  // empty: the model's (CompileOptions::policy), as Keras's `dtype=`
};

struct Adam {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-7;
};

struct Sgd {
  double learning_rate = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
};

using Optimizer = std::variant<Adam, Sgd>;

enum class Loss {
  // Integer class labels. With a softmax output layer (from_logits false) the loss is computed from the layer's
  // logits, fused and stable, as Keras does; otherwise from the probabilities (clipped to [1e-7, 1 - 1e-7]).
  sparse_categorical_crossentropy,
  // Float targets of the output's shape.
  mean_squared_error,
};

}  // namespace tp::train

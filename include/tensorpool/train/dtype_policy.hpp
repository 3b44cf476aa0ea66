// SPDX-License-Identifier: Apache-2.0
#pragma once
// Mixed precision policies, as Keras's `DTypePolicy`: where a layer keeps its variables and in which dtype it
// computes.
//
//   float32:          variables and compute in float32 (the default).
//   mixed_float16:    variables in float32 (master weights), matmul, bias add and activations in float16;
//                     training needs dynamic loss scaling (loss_scale.hpp) against float16's narrow range.
//   mixed_bfloat16:   variables in float32, compute in bfloat16 (float32's range: no loss scaling).
//
// A model has one policy (CompileOptions::policy) and a layer may override it (Dense::policy), as Keras's
// `dtype=` argument. The graph casts each layer's input and variables to the layer's compute dtype, casts the
// output layer's values back to float32 before softmax and the loss, and keeps reductions, the loss and the
// optimizer update in float32 (gradients reach the float32 variables through the casts' gradients).

#include <string_view>

#include "tensorpool/core/dtype.hpp"

namespace tp::train {

class DTypePolicy {
 public:
  enum class Kind { float32, mixed_float16, mixed_bfloat16 };

  constexpr DTypePolicy() = default;  // float32
  constexpr explicit DTypePolicy(Kind kind) : kind_(kind) {}
  static constexpr DTypePolicy float32() { return DTypePolicy(Kind::float32); }
  static constexpr DTypePolicy mixed_float16() { return DTypePolicy(Kind::mixed_float16); }
  static constexpr DTypePolicy mixed_bfloat16() { return DTypePolicy(Kind::mixed_bfloat16); }
  // "float32", "mixed_float16" or "mixed_bfloat16"; anything else throws tp::InvalidArgument naming `what`
  // (e.g. "--precision"), the text and the accepted names.
  [[nodiscard]] static DTypePolicy from_name(std::string_view name, std::string_view what = "dtype policy");

  Kind kind() const noexcept { return kind_; }
  std::string_view name() const noexcept;
  [[nodiscard]] DType compute_dtype() const noexcept;
  DType variable_dtype() const noexcept { return DType::f32; }
  bool is_mixed() const noexcept { return kind_ != Kind::float32; }
  // float16 underflows small gradients (its smallest subnormal is 2^-24): its training needs loss scaling.
  bool needs_loss_scaling() const noexcept { return kind_ == Kind::mixed_float16; }

  friend constexpr bool operator==(DTypePolicy, DTypePolicy) = default;

 private:
  Kind kind_ = Kind::float32;
};

}  // namespace tp::train

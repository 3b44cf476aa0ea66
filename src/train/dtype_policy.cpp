// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/dtype_policy.hpp"

#include "tensorpool/core/error.hpp"

namespace tp::train {

DTypePolicy DTypePolicy::from_name(std::string_view name, std::string_view what) {
  for (const DTypePolicy policy : {float32(), mixed_float16(), mixed_bfloat16()}) {
    if (policy.name() == name) return policy;
  }
  TP_THROW(InvalidArgument, "train", what, " '", name, "' is not one of float32, mixed_float16, mixed_bfloat16");
}

std::string_view DTypePolicy::name() const noexcept {
  switch (kind_) {
    case Kind::float32: return "float32";
    case Kind::mixed_float16: return "mixed_float16";
    case Kind::mixed_bfloat16: return "mixed_bfloat16";
  }
  return "float32";
}

DType DTypePolicy::compute_dtype() const noexcept {
  switch (kind_) {
    case Kind::float32: return DType::f32;
    case Kind::mixed_float16: return DType::f16;
    case Kind::mixed_bfloat16: return DType::bf16;
  }
  return DType::f32;
}

}  // namespace tp::train

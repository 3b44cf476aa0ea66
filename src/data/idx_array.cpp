// SPDX-License-Identifier: Apache-2.0
// IdxType names and sizes, and the IdxArray invariant.
#include <limits>

#include "data/idx_format.hpp"
#include "tensorpool/data/idx.hpp"

namespace tp::data {

using detail::dims_text;

std::size_t size_of(IdxType type) noexcept {
  switch (type) {
    case IdxType::u8:
    case IdxType::i8: return 1;
    case IdxType::i16: return 2;
    case IdxType::i32:
    case IdxType::f32: return 4;
    case IdxType::f64: return 8;
  }
  return 0;
}

std::string_view to_string(IdxType type) noexcept {
  switch (type) {
    case IdxType::u8: return "u8";
    case IdxType::i8: return "i8";
    case IdxType::i16: return "i16";
    case IdxType::i32: return "i32";
    case IdxType::f32: return "f32";
    case IdxType::f64: return "f64";
  }
  return "unknown";
}

std::optional<IdxType> idx_type_from_code(std::uint8_t code) noexcept {
  switch (code) {
    case 0x08:
    case 0x09:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x0E: return static_cast<IdxType>(code);
    default: return std::nullopt;
  }
}

std::int64_t IdxArray::num_elements() const noexcept {
  std::int64_t count = dims.empty() ? 0 : 1;
  for (const std::int64_t dim : dims) count *= dim;
  return count;
}

void IdxArray::validate() const {
  if (dims.empty() || dims.size() > 4) {
    TP_THROW(InvalidArgument, "data", "IdxArray: ", dims.size(), " dimensions ", dims_text(dims),
             "; IDX arrays have 1 to 4");
  }
  if (!idx_type_from_code(static_cast<std::uint8_t>(type))) {
    TP_THROW(InvalidArgument, "data", "IdxArray: unknown element type code ", static_cast<int>(type));
  }
  std::size_t elements = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] <= 0 || dims[i] > std::numeric_limits<std::int32_t>::max()) {
      TP_THROW(InvalidArgument, "data", "IdxArray: dimension ", i, " of ", dims_text(dims),
               " must be in 1..2147483647");
    }
    if (__builtin_mul_overflow(elements, static_cast<std::size_t>(dims[i]), &elements)) {
      TP_THROW(InvalidArgument, "data", "IdxArray: ", dims_text(dims), " has more elements than fit in size_t");
    }
  }
  std::size_t expected = 0;
  if (__builtin_mul_overflow(elements, size_of(type), &expected) || expected != bytes.size()) {
    TP_THROW(InvalidArgument, "data", "IdxArray: ", dims_text(dims), " of ", to_string(type), " needs ", elements,
             " x ", size_of(type), " bytes but holds ", bytes.size());
  }
}

void IdxArray::check_type(IdxType requested) const {
  if (requested != type) {
    TP_THROW(InvalidArgument, "data", "IdxArray holds ", to_string(type), " elements, not ", to_string(requested));
  }
}

}  // namespace tp::data

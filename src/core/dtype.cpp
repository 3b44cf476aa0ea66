// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/dtype.hpp"

#include <array>
#include <ostream>
#include <string>

#include "tensorpool/core/error.hpp"

namespace tp {
namespace {

struct DTypeInfo {
  DType dtype;
  std::size_t size;
  std::string_view name;
  std::string_view short_name;
  bool floating;
};

// Indexed by the enumerator's value; the static_assert below keeps the order honest.
constexpr std::array<DTypeInfo, 8> kDTypes{{
    {DType::f32, 4, "float32", "f32", true},
    {DType::f16, 2, "float16", "f16", true},
    {DType::bf16, 2, "bfloat16", "bf16", true},
    {DType::f64, 8, "float64", "f64", true},
    {DType::i32, 4, "int32", "i32", false},
    {DType::i64, 8, "int64", "i64", false},
    {DType::u8, 1, "uint8", "u8", false},
    {DType::boolean, 1, "bool", "bool", false},
}};

constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < kDTypes.size(); ++i) {
    if (static_cast<std::size_t>(kDTypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(table_in_enum_order(), "kDTypes must list the DType enumerators in declaration order");

const DTypeInfo& info(DType dtype) {
  const auto index = static_cast<std::size_t>(dtype);
  if (index >= kDTypes.size()) {
    TP_THROW(InvalidArgument, "core", "DType value ", index, " is not a valid dtype");
  }
  return kDTypes[index];
}

}  // namespace

std::size_t size_of(DType dtype) { return info(dtype).size; }

std::string_view name_of(DType dtype) { return info(dtype).name; }

bool is_floating(DType dtype) { return info(dtype).floating; }

std::ostream& operator<<(std::ostream& stream, DType dtype) { return stream << name_of(dtype); }

DType parse_dtype(std::string_view text) {
  for (const DTypeInfo& entry : kDTypes) {
    if (text == entry.name || text == entry.short_name) return entry.dtype;
  }
  std::string accepted;
  for (const DTypeInfo& entry : kDTypes) {
    if (!accepted.empty()) accepted += ", ";
    accepted.append(entry.name);
    if (entry.short_name != entry.name) accepted.append(" (").append(entry.short_name).append(")");
  }
  TP_THROW(InvalidArgument, "core", "'", text, "' is not a dtype; accepted: ", accepted);
}

}  // namespace tp

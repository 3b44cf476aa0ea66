// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/check.hpp"

#include <limits>

#include "tensorpool/core/error.hpp"

namespace tp::backend::cpu::detail {

void check_size(std::string_view kernel, std::string_view name, std::int64_t value) {
  if (value < 0) TP_THROW(InvalidArgument, kComponent, kernel, ": ", name, " = ", value, " is negative");
}

std::int64_t checked_product(std::string_view kernel, std::int64_t first, std::int64_t second) {
  if (first != 0 && second > std::numeric_limits<std::int64_t>::max() / first) {
    TP_THROW(InvalidArgument, kComponent, kernel, ": ", first, " x ", second, " elements overflow int64");
  }
  return first * second;
}

void check_pointer(std::string_view kernel, std::string_view name, const void* pointer, std::int64_t count) {
  if (pointer == nullptr && count > 0) {
    TP_THROW(InvalidArgument, kComponent, kernel, ": ", name, " is null but must hold ", count, " elements");
  }
}

}  // namespace tp::backend::cpu::detail

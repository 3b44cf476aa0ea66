// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/fragmentation.hpp"

#include <fmt/format.h>

#include "tensorpool/core/units.hpp"

namespace tp::memory {

std::string describe(const Fragmentation& fragmentation) {
  std::string text = fmt::format("fragmentation {:.1f}% external", 100.0 * fragmentation.external);
  if (fragmentation.free_bytes == 0) {
    text += " (nothing reserved is free)";
  } else {
    text += fmt::format(" (largest free block {} of {} reserved and free)",
                        format_bytes(fragmentation.largest_free_block), format_bytes(fragmentation.free_bytes));
  }
  if (fragmentation.internal_bytes.has_value()) {
    text += fmt::format(", {} internal (rounding)", format_bytes(*fragmentation.internal_bytes));
  }
  return text;
}

}  // namespace tp::memory

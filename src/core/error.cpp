// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/error.hpp"

#include <cstring>

namespace tp::detail {

std::string format_error(std::string_view component, std::string_view message, const char* file, int line) {
  // Only the file's base name: full build paths are noise in user-facing errors.
  const char* slash = std::strrchr(file, '/');
  const char* base = slash != nullptr ? slash + 1 : file;
  std::string text;
  text.reserve(component.size() + message.size() + 32);
  text.append("[").append(component).append("] ").append(message);
  text.append(" (").append(base).append(":").append(std::to_string(line)).append(")");
  return text;
}

}  // namespace tp::detail

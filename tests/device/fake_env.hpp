// SPDX-License-Identifier: Apache-2.0
#pragma once
// An injected environment for the device tests: results then do not depend on the caller's TP_* variables.
#include <map>
#include <memory>
#include <string>

#include "tensorpool/memory/memory_config.hpp"

namespace tp::device::testing {

using Variables = std::map<std::string, std::string>;

// A get_env over `variables`; the map lives as long as the returned function (and its copies).
inline memory::GetEnv env_of(Variables variables) {
  auto owned = std::make_shared<const Variables>(std::move(variables));
  return [owned](const char* name) -> const char* {
    const auto found = owned->find(name);
    return found == owned->end() ? nullptr : found->second.c_str();
  };
}

}  // namespace tp::device::testing

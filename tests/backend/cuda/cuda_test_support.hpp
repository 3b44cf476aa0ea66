// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the cuda device tests share: the skip on a machine without a GPU (ctest reports SKIPPED with the reason
// from cuda_unavailable_reason()), a DeviceManager of the test's own, blind to the caller's TP_* variables, and
// byte patterns to copy around.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensorpool/device/backends.hpp"
#include "tensorpool/device/device_manager.hpp"

// Skips the test, with the reason, unless the CUDA runtime reports a GPU.
#define TP_REQUIRE_CUDA()                                      \
  do {                                                         \
    if (::tp::device::cuda_physical_devices().empty()) {       \
      GTEST_SKIP() << ::tp::device::cuda_unavailable_reason(); \
    }                                                          \
  } while (false)

namespace tp::backend::cuda::testing {

// Sets the environment variable `name` for the scope, restoring what was there (a library path the loaders read).
class EnvironmentScope {
 public:
  EnvironmentScope(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;  // NOLINT(concurrency-mt-unsafe)
    ::setenv(name_.c_str(), value.c_str(), 1);                     // NOLINT(concurrency-mt-unsafe)
  }
  ~EnvironmentScope() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
    } else {
      ::unsetenv(name_.c_str());  // NOLINT(concurrency-mt-unsafe)
    }
  }
  EnvironmentScope(const EnvironmentScope&) = delete;
  EnvironmentScope& operator=(const EnvironmentScope&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Options for the cuda devices alone (no sim, no opencl): cuda:0 split into `limits` logical devices when
// given, else one cuda:N per GPU.
inline device::DeviceManagerOptions cuda_options(std::vector<std::size_t> limits = {}, std::size_t streams = 1) {
  device::DeviceManagerOptions options;
  options.opencl_devices = 0;
  options.device_options.num_streams = streams;
  if (!limits.empty()) {
    std::vector<device::LogicalDeviceConfig> logical;
    for (const std::size_t limit : limits) logical.push_back({limit});
    options.splits[{device::DeviceKind::cuda, 0}] = std::move(logical);
  }
  return options;
}

// A manager that reads no environment variable: the tests' devices do not depend on the caller's TP_*.
inline std::unique_ptr<device::DeviceManager> make_manager(device::DeviceManagerOptions options) {
  return std::make_unique<device::DeviceManager>(std::move(options),
                                                 [](const char*) -> const char* { return nullptr; });
}

// `bytes` bytes that differ from one position and one `seed` to the next.
inline std::vector<std::uint8_t> pattern(std::size_t bytes, std::uint32_t seed) {
  std::vector<std::uint8_t> data(bytes);
  std::uint32_t state = seed * 2654435761U + 1U;
  for (auto& byte : data) {
    state = state * 1664525U + 1013904223U;
    byte = static_cast<std::uint8_t>(state >> 24);
  }
  return data;
}

}  // namespace tp::backend::cuda::testing

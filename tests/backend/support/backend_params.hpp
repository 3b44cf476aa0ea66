// SPDX-License-Identifier: Apache-2.0
#pragma once
// The parameters of the backend conformance suites: one device per backend present in this process
// (cpu:0, sim:0, opencl:0, ...), discovered through the process's DeviceManager, so a new backend's devices
// join every suite instantiated over backend_devices() without an edit to it.
//
//   INSTANTIATE_TEST_SUITE_P(Backends, MySuite, ::testing::ValuesIn(backend_devices()), backend_test_name);
//
// gives MySuite.Case/Cpu, /Sim, /Opencl, and /Cuda on a machine with a GPU (the DeviceManager lists cuda:0
// whenever the CUDA runtime reports one; without a GPU there is no cuda device and no /Cuda instance). The list is built when GoogleTest registers the parameterised tests
// (after main starts), which materialises the DeviceManager: prepare_backend_environment() runs first.

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "tensorpool/device/device.hpp"
#include "tensorpool/device/device_manager.hpp"

namespace tp::backend::testing {

// Sets POCL_CACHE_DIR=<build>/pocl-cache (the folder above the test binary's) when unset, so every test
// process of a run shares PoCL's compiled kernels instead of compiling them again. Call it before the first
// OpenCL device is made (tests that make devices through the factories, without the DeviceManager, too).
inline void prepare_pocl_cache() {
  if (std::getenv("POCL_CACHE_DIR") != nullptr) return;
  std::error_code error;
  const std::filesystem::path binary = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return;  // not Linux: PoCL then uses its own default cache
  const std::filesystem::path cache = binary.parent_path().parent_path() / "pocl-cache";
  std::filesystem::create_directories(cache, error);
  if (!error) ::setenv("POCL_CACHE_DIR", cache.c_str(), /*overwrite=*/0);
}

// Before the process's DeviceManager materialises, sets what is unset: TP_SIM_DEVICES=1, so the sim backend
// is exercised (TP_SIM_DEVICES=0 or TP_VISIBLE_DEVICES still hide it), and the PoCL cache above.
inline void prepare_backend_environment() {
  ::setenv("TP_SIM_DEVICES", "1", /*overwrite=*/0);
  prepare_pocl_cache();
}

// The first device of every kind the process's DeviceManager lists, in its order: "cpu:0", "sim:0",
// "opencl:0", ... (cpu:0 is always there).
inline std::vector<std::string> backend_devices() {
  prepare_backend_environment();
  std::vector<std::string> names;
  for (const device::Device* device : device::DeviceManager::instance().devices()) {
    if (device->id().index == 0) names.push_back(device->name());
  }
  return names;
}

// "opencl:0" -> "Opencl": the instantiation's name suffix (letters only, as GoogleTest requires).
inline std::string backend_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name;
  for (const char character : info.param) {
    if (character == ':') break;
    if (std::isalnum(static_cast<unsigned char>(character)) != 0) name += character;
  }
  if (!name.empty()) name[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(name[0])));
  return name;
}

// Another device of this process than `device` (cpu:0 for an accelerator, the first accelerator for
// cpu:0), for the checks that mix devices; null when the process has only one.
inline device::Device* other_device(const device::Device& device) {
  for (device::Device* candidate : device::DeviceManager::instance().devices()) {
    if (candidate != &device && candidate->kind() != device.kind()) return candidate;
  }
  return nullptr;
}

}  // namespace tp::backend::testing

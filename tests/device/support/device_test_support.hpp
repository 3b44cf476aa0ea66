// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers for device tests: devices built directly through the backends' factories (no DeviceManager), the
// backends present in this build and on this machine (for suites parameterised over them), a latch a task
// can block on, and running a function on a stream to read back its result.

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/support/backend_params.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/device/device_manager.hpp"

namespace tp::device::testing {

enum class Backend { cpu, sim, opencl };

// Every backend this process can make a device of, in this order: cpu and sim always, opencl when the
// build has the OpenCL backend and the ICD loader reports a device (PoCL in CI), unless TP_OPENCL_DEVICES=0
// hides the OpenCL devices (as it does from the DeviceManager; a bad value throws naming the variable).
inline std::vector<Backend> present_backends() {
  backend::testing::prepare_pocl_cache();
  std::vector<Backend> present{Backend::cpu, Backend::sim};
  DeviceManagerOptions environment;
  apply_device_env(environment);
  if (environment.opencl_devices != 0 && !opencl_physical_devices().empty()) present.push_back(Backend::opencl);
  return present;
}

// The present backends whose streams are queues run by a worker (sim, opencl), not the cpu's inline
// streams that run a task in the enqueuing thread: the cases that hold a stream behind a gate.
inline std::vector<Backend> queued_backends() {
  std::vector<Backend> queued;
  for (const Backend backend : present_backends()) {
    if (backend != Backend::cpu) queued.push_back(backend);
  }
  return queued;
}

inline const char* backend_label(Backend backend) {
  switch (backend) {
    case Backend::cpu: return "cpu";
    case Backend::sim: return "sim";
    case Backend::opencl: return "opencl";
  }
  return "unknown";
}

// Device names of the present backends' first devices, as a DeviceManager lists them: "cpu:0", "sim:0",
// "opencl:0" (for suites over a DeviceManager's devices; its options must ask for a sim device).
inline std::vector<std::string> present_device_names() {
  std::vector<std::string> names;
  for (const Backend backend : present_backends()) names.push_back(std::string(backend_label(backend)) + ":0");
  return names;
}

// The same without cpu:0: the accelerators a step, a fetch or a fit runs on.
inline std::vector<std::string> accelerator_device_names() {
  std::vector<std::string> names;
  for (const Backend backend : queued_backends()) names.push_back(std::string(backend_label(backend)) + ":0");
  return names;
}

// The instantiation's name suffix: Suite.Case/cpu, /sim, /opencl.
inline std::string backend_param_name(const ::testing::TestParamInfo<Backend>& info) {
  return backend_label(info.param);
}

inline memory::MemoryConfig grow_config(const char* name, std::size_t limit_bytes) {
  memory::MemoryConfig config;
  config.device = name;
  config.policy = memory::GrowthPolicy::grow;
  config.limit_bytes = limit_bytes;
  return config;
}

inline std::unique_ptr<Device> make_device(Backend backend, std::size_t capacity_bytes = 64 * kMiB,
                                           DeviceOptions options = {}, int index = 0) {
  if (backend == Backend::cpu) {
    return make_cpu_device({DeviceKind::cpu, index}, {DeviceKind::cpu, index}, capacity_bytes,
                           grow_config("cpu", capacity_bytes), options);
  }
  if (backend == Backend::opencl) {
    // Every logical opencl:N on physical opencl:0 (PoCL reports one device); they share its context.
    backend::testing::prepare_pocl_cache();
    return make_opencl_device({DeviceKind::opencl, index}, {DeviceKind::opencl, 0}, capacity_bytes,
                              grow_config("opencl", capacity_bytes), options);
  }
  return make_sim_device({DeviceKind::sim, index}, {DeviceKind::sim, index}, capacity_bytes,
                         grow_config("sim", capacity_bytes), options);
}

// A gate tasks wait on until the test opens it.
class Gate {
 public:
  void wait() {
    std::unique_lock lock(mutex_);
    opened_condition_.wait(lock, [this] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_condition_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable opened_condition_;
  bool open_ = false;
};

// Runs `function` as a task on `stream` and returns its result once it has run.
template <typename Function>
auto run_on(Stream& stream, Function function) {
  using Result = decltype(function());
  auto promise = std::make_shared<std::promise<Result>>();
  std::future<Result> future = promise->get_future();
  stream.enqueue([promise, function] { promise->set_value(function()); });
  stream.synchronize();
  return future.get();
}

}  // namespace tp::device::testing

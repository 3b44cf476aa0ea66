#pragma once
// Helpers for device tests: devices built directly through the backends' factories (no DeviceManager), a
// latch a task can block on, and running a function on a stream to read back its result.

#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>

#include "tensorpool/core/units.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::device::testing {

enum class Backend { cpu, sim };

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

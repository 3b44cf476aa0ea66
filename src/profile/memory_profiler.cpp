// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/profile/memory_profiler.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"
#include "tensorpool/profile/exporters.hpp"

namespace tp::profile {
namespace {

// The recorders of one device: its memory's and, when it has shared memory that tracks allocations, that
// stack's (either may be null).
struct Recorders {
  DeviceRecorder* device = nullptr;
  DeviceRecorder* shared = nullptr;
};

// Which recorders watch which device, so that the free functions find them. Guarded by registry_mutex().
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<const device::Device*, Recorders>& registry() {
  static std::map<const device::Device*, Recorders> recorders;
  return recorders;
}

Recorders recorders_of(const device::Device& device) {
  const std::lock_guard lock(registry_mutex());
  const auto found = registry().find(&device);
  return found == registry().end() ? Recorders{} : found->second;
}

DeviceRecorder* recorder_of(const device::Device& device) { return recorders_of(device).device; }

}  // namespace

struct MemoryProfiler::Attachment {
  device::Device* device = nullptr;
  std::unique_ptr<DeviceRecorder> recorder;         // on device->memory(); null when it does not track
  std::unique_ptr<DeviceRecorder> shared_recorder;  // on device->shared_memory(), when it has one that tracks
  std::optional<std::size_t> planned_peak;

  void detach() noexcept {
    if (recorder != nullptr) device->memory().tracking()->remove_observer(*recorder);
    if (shared_recorder != nullptr) device->shared_memory()->tracking()->remove_observer(*shared_recorder);
  }
};

MemoryProfiler::MemoryProfiler(std::vector<device::Device*> devices, ProfilerOptions options)
    : devices_(std::move(devices)), oom_snapshot_path_(std::move(options.oom_snapshot_path)) {
  if (oom_snapshot_path_.empty()) {
    if (const char* path = std::getenv("TP_OOM_SNAPSHOT")) oom_snapshot_path_ = path;
  }
  epoch_ns_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const std::lock_guard lock(registry_mutex());
  for (device::Device* device : devices_) {
    if (device == nullptr) TP_THROW(InvalidArgument, "profile", "MemoryProfiler: a device is null");
    if (registry().contains(device)) {
      for (auto& attachment : attachments_) {  // undo what this constructor attached
        attachment->detach();
        registry().erase(attachment->device);
      }
      TP_THROW(InvalidArgument, "profile", "device ", device->name(),
               " is already recorded by another MemoryProfiler; destroy that one first");
    }
    // Stacks without tracking are reported without recording (MemoryConfig::tracking is off).
    memory::TrackingAdaptor* tracking = device->memory().tracking();
    memory::TrackingAdaptor* shared_tracking =
        device->shared_memory() != nullptr ? device->shared_memory()->tracking() : nullptr;
    if (tracking == nullptr && shared_tracking == nullptr) continue;
    auto attachment = std::make_unique<Attachment>();
    attachment->device = device;
    std::function<void(const std::string&)> on_failure;
    if (!oom_snapshot_path_.empty()) on_failure = [this](const std::string& name) { write_oom_snapshot(name); };
    auto attach = [&](memory::MemoryStack& stack, memory::TrackingAdaptor& stack_tracking, const std::string& name) {
      auto recorder =
          std::make_unique<DeviceRecorder>(name, stack, options.max_events_per_device, epoch_ns_, on_failure);
      recorder->seed(stack_tracking.live_allocations());
      stack_tracking.add_observer(*recorder);
      return recorder;
    };
    if (tracking != nullptr) attachment->recorder = attach(device->memory(), *tracking, device->name());
    if (shared_tracking != nullptr) {
      attachment->shared_recorder =
          attach(*device->shared_memory(), *shared_tracking, device->shared_memory()->config().device);
    }
    registry()[device] = {attachment->recorder.get(), attachment->shared_recorder.get()};
    attachments_.push_back(std::move(attachment));
  }
}

MemoryProfiler::~MemoryProfiler() {
  const std::lock_guard lock(registry_mutex());
  for (auto& attachment : attachments_) {
    attachment->detach();
    registry().erase(attachment->device);
  }
}

void MemoryProfiler::set_planned_peak(const std::string& device, std::size_t bytes) {
  for (auto& attachment : attachments_) {
    if (attachment->device->name() == device) {
      attachment->planned_peak = bytes;
      return;
    }
  }
  TP_THROW(InvalidArgument, "profile", "set_planned_peak: ", device, " is not a device this profiler records");
}

MemorySnapshot MemoryProfiler::snapshot(std::string reason) const {
  MemorySnapshot snapshot;
  snapshot.reason = std::move(reason);
  snapshot.time_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count() -
      epoch_ns_;
  for (device::Device* device : devices_) {
    const Attachment* attached = nullptr;
    for (const auto& attachment : attachments_) {
      if (attachment->device == device) attached = attachment.get();
    }
    DeviceSnapshot entry = snapshot_device(*device, attached != nullptr ? attached->recorder.get() : nullptr);
    if (attached != nullptr) entry.planned_peak_bytes = attached->planned_peak;
    snapshot.devices.push_back(std::move(entry));
    if (device->shared_memory() != nullptr) {
      snapshot.devices.push_back(
          snapshot_shared_memory(*device, attached != nullptr ? attached->shared_recorder.get() : nullptr));
    }
  }
  return snapshot;
}

void MemoryProfiler::write_oom_snapshot(const std::string& device) const noexcept {
  try {
    std::ofstream out(oom_snapshot_path_);
    out << snapshot_json(snapshot("out of memory on " + device)) << '\n';
    if (!out) TP_LOG(error, "profile", "cannot write TP_OOM_SNAPSHOT file ", oom_snapshot_path_);
  } catch (const std::exception& error) {
    TP_LOG(error, "profile", "the out-of-memory snapshot was not written: ", error.what());
  }
}

MemoryInfo memory_info(device::Device& device) {
  const memory::MemoryStats stats = device.memory().stats();
  MemoryInfo info{stats.bytes_in_use, stats.peak_bytes_in_use};
  if (memory::MemoryStack* shared = device.shared_memory()) {
    const memory::MemoryStats shared_stats = shared->stats();
    info.shared_current = shared_stats.bytes_in_use;
    info.shared_peak = shared_stats.peak_bytes_in_use;
  }
  return info;
}

void reset_memory_stats(device::Device& device) {
  device.memory().reset_peak();
  if (memory::MemoryStack* shared = device.shared_memory()) shared->reset_peak();
  const Recorders recorders = recorders_of(device);
  if (recorders.device != nullptr) recorders.device->reset_peaks();
  if (recorders.shared != nullptr) recorders.shared->reset_peaks();
}

std::string memory_summary(device::Device& device) {
  std::string summary = summary_table(snapshot_device(device, recorder_of(device)));
  if (!summary.empty() && summary.back() != '\n') summary += '\n';
  summary += "shared memory: " + device.shared_memory_note() + "\n";
  if (memory::MemoryStack* shared = device.shared_memory()) {
    const memory::MemoryStats stats = shared->stats();
    summary += "  " + shared->config().device + ": in use " + format_bytes(stats.bytes_in_use) + ", peak " +
               format_bytes(stats.peak_bytes_in_use) + ", reserved " + format_bytes(stats.bytes_reserved) + ", " +
               std::to_string(stats.num_allocs) + " allocs\n";
  }
  return summary;
}

MemorySnapshot memory_snapshot(const std::vector<device::Device*>& devices, std::string reason) {
  MemorySnapshot snapshot;
  snapshot.reason = std::move(reason);
  for (device::Device* device : devices) {
    const Recorders recorders = recorders_of(*device);
    snapshot.devices.push_back(snapshot_device(*device, recorders.device));
    if (device->shared_memory() != nullptr) {
      snapshot.devices.push_back(snapshot_shared_memory(*device, recorders.shared));
    }
  }
  return snapshot;
}

}  // namespace tp::profile

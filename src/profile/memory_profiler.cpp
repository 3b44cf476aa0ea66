#include "tensorpool/profile/memory_profiler.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"
#include "tensorpool/profile/exporters.hpp"

namespace tp::profile {
namespace {

// Which recorder watches which device, so that the free functions find it. Guarded by registry_mutex().
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<const device::Device*, DeviceRecorder*>& registry() {
  static std::map<const device::Device*, DeviceRecorder*> recorders;
  return recorders;
}

DeviceRecorder* recorder_of(const device::Device& device) {
  const std::lock_guard lock(registry_mutex());
  const auto found = registry().find(&device);
  return found == registry().end() ? nullptr : found->second;
}

}  // namespace

struct MemoryProfiler::Attachment {
  device::Device* device = nullptr;
  std::unique_ptr<DeviceRecorder> recorder;
  std::optional<std::size_t> planned_peak;
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
        attachment->device->memory().tracking()->remove_observer(*attachment->recorder);
        registry().erase(attachment->device);
      }
      TP_THROW(InvalidArgument, "profile", "device ", device->name(),
               " is already recorded by another MemoryProfiler; destroy that one first");
    }
    memory::TrackingAdaptor* tracking = device->memory().tracking();
    if (tracking == nullptr) continue;  // reported without recording (MemoryConfig::tracking is off)
    auto attachment = std::make_unique<Attachment>();
    attachment->device = device;
    std::function<void(const std::string&)> on_failure;
    if (!oom_snapshot_path_.empty()) on_failure = [this](const std::string& name) { write_oom_snapshot(name); };
    attachment->recorder = std::make_unique<DeviceRecorder>(device->name(), device->memory(),
                                                            options.max_events_per_device, epoch_ns_, on_failure);
    attachment->recorder->seed(tracking->live_allocations());
    tracking->add_observer(*attachment->recorder);
    registry()[device] = attachment->recorder.get();
    attachments_.push_back(std::move(attachment));
  }
}

MemoryProfiler::~MemoryProfiler() {
  const std::lock_guard lock(registry_mutex());
  for (auto& attachment : attachments_) {
    attachment->device->memory().tracking()->remove_observer(*attachment->recorder);
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
  }
  return snapshot;
}

void MemoryProfiler::write_oom_snapshot(const std::string& device) const noexcept {
  try {
    std::ofstream out(oom_snapshot_path_);
    out << snapshot_json(snapshot("out of memory on " + device)) << '\n';
    if (!out) std::fprintf(stderr, "[profile] cannot write TP_OOM_SNAPSHOT file %s\n", oom_snapshot_path_.c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "[profile] the out-of-memory snapshot was not written: %s\n", error.what());
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
  if (DeviceRecorder* recorder = recorder_of(device)) recorder->reset_peaks();
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
  for (device::Device* device : devices) snapshot.devices.push_back(snapshot_device(*device, recorder_of(*device)));
  return snapshot;
}

}  // namespace tp::profile

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/report/profile_output.hpp"

#include <algorithm>
#include <cstdlib>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/memory/trace.hpp"
#include "tensorpool/profile/exporters.hpp"

namespace tp::report {

std::unique_ptr<profile::MemoryProfiler> start_profiler(device::DeviceManager& manager,
                                                        const std::vector<std::string>& names, bool wanted,
                                                        std::size_t max_events_per_device) {
  if (!wanted && std::getenv("TP_OOM_SNAPSHOT") == nullptr) return nullptr;
  std::vector<device::Device*> devices;
  for (const std::string& name : names) devices.push_back(&manager.device(name));
  device::Device& host = manager.device("cpu:0");
  if (std::find(devices.begin(), devices.end(), &host) == devices.end()) devices.push_back(&host);
  return std::make_unique<profile::MemoryProfiler>(
      devices, profile::ProfilerOptions{.max_events_per_device = max_events_per_device});
}

std::vector<device::Device*> named_devices(device::DeviceManager& manager, const std::vector<std::string>& names) {
  std::vector<device::Device*> devices;
  for (const std::string& name : names) devices.push_back(&manager.device(name));
  return devices;
}

void set_planned_peaks(profile::MemoryProfiler& profiler, const runtime::MemoryPlan& plan) {
  for (const runtime::DevicePlan& device : plan.devices)
    profiler.set_planned_peak(device.device, device.planned_peak_bytes);
}

std::string trace_file_name(std::string device) {
  std::replace(device.begin(), device.end(), ':', '_');
  std::replace(device.begin(), device.end(), '/', '_');  // a shared memory's entry: "opencl:0/shared"
  return "trace-" + device + ".csv";
}

std::string write_profile(const std::filesystem::path& directory, const profile::MemorySnapshot& snapshot) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    TP_THROW(DataError, "profile", "cannot create the output directory ", directory.string(), ": ", error.message());
  }
  std::string summary;
  for (const profile::DeviceSnapshot& device : snapshot.devices) summary += profile::summary_table(device);
  profile::write_text_file(directory / "snapshot.json", profile::snapshot_json(snapshot) + "\n");
  profile::write_text_file(directory / "trace.json", profile::chrome_trace_json(snapshot) + "\n");
  for (const profile::DeviceSnapshot& device : snapshot.devices) {
    memory::write_trace_file(directory / trace_file_name(device.device),
                             profile::recorded_trace(snapshot, device.device));
  }
  profile::write_text_file(directory / "report.html", profile::html_report(snapshot));
  profile::write_text_file(directory / "summary.txt", summary);
  return summary;
}

void write_profile_at_oom(const std::filesystem::path& directory, const profile::MemoryProfiler& profiler,
                          const std::string& device) noexcept {
  try {
    write_profile(directory, profiler.snapshot(device.empty() ? "out of memory" : "out of memory on " + device));
    TP_LOG(info, "profile", "memory profile at the out-of-memory error written to ", directory.string());
  } catch (const std::exception& writing) {
    TP_LOG(error, "profile", "the profile was not written: ", writing.what());
  }
}

}  // namespace tp::report

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The memory profiler as the CLI (train --profile DIR, profile --out DIR) and tensorpool.profiler.profile(DIR)
// use it: started over the run's devices and cpu:0 (host staging of feeds and fetches lives there), and, at the
// end, its snapshot written as
// snapshot.json, trace.json (Chrome trace), one RMM trace per device for `tensorpool replay`
// (trace-sim_0.csv...: a device's own events, so its replay reproduces that device's peak), report.html and
// summary.txt (docs/profiling.md).
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/profile/memory_profiler.hpp"
#include "tensorpool/runtime/memory_plan.hpp"

namespace tp::report {

// A profiler over `names` and cpu:0 when `wanted` or TP_OOM_SNAPSHOT is set (so an out-of-memory snapshot can
// be written), else null: recording stays off by default.
std::unique_ptr<profile::MemoryProfiler> start_profiler(device::DeviceManager& manager,
                                                        const std::vector<std::string>& names, bool wanted,
                                                        std::size_t max_events_per_device = std::size_t{1} << 16);
// The devices named, in order.
std::vector<device::Device*> named_devices(device::DeviceManager& manager, const std::vector<std::string>& names);
// Hands the plan's peaks to the profiler, so snapshots show planned next to measured.
void set_planned_peaks(profile::MemoryProfiler& profiler, const runtime::MemoryPlan& plan);
// "sim:0" -> "trace-sim_0.csv": the file of a device's recorded trace.
std::string trace_file_name(std::string device);
// Writes the files into `directory` (created if missing); returns the summary text.
std::string write_profile(const std::filesystem::path& directory, const profile::MemorySnapshot& snapshot);
// After an out-of-memory error on `device` (empty when unknown): the five files, taken while everything that
// was live at the failure is still live. Never throws: a write error is logged (TP_LOG), so it cannot hide
// the out-of-memory error the caller is about to rethrow.
void write_profile_at_oom(const std::filesystem::path& directory, const profile::MemoryProfiler& profiler,
                          const std::string& device) noexcept;

}  // namespace tp::report

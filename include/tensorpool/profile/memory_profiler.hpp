// SPDX-License-Identifier: Apache-2.0
#pragma once
// The memory profiler's front: a MemoryProfiler records every allocation and free of the devices it is given
// (off by default: nothing is recorded until one exists), and the query API works on any device, recorded or
// not:
//
//   tp::profile::MemoryProfiler profiler(manager.devices());          // recording starts
//   ... run ...
//   tp::profile::MemoryInfo info = tp::profile::memory_info(device);  // {current, peak} bytes in use
//   std::cout << tp::profile::memory_summary(device);                 // the summary table
//   tp::profile::MemorySnapshot snapshot = tp::profile::memory_snapshot(manager.devices());
//   tp::profile::reset_memory_stats(device);                          // peaks restart from now
//
// A device with shared memory (Device::shared_memory(): fine-grained SVM on opencl) has a second recorder on
// that stack: snapshots list it as an entry of its own right after the device's (named "opencl:0/shared",
// DeviceSnapshot::shared_of = "opencl:0"), with its tensors, events, peak breakdown and high-water marks, so
// shared bytes are told apart per tensor, never mixed into the device memory's figures.
//
// Recording needs the devices' stacks to track allocations (MemoryConfig::tracking, on by default); a device
// without tracking is reported without recording. With ProfilerOptions::oom_snapshot_path (or
// TP_OOM_SNAPSHOT=FILE in the environment), a refused allocation on a recorded device writes the snapshot JSON
// there before the tp::OutOfMemoryError leaves, while everything that was live is still live.
//
// Lifetime: devices must outlive the profiler, which detaches from them in its destructor. At most one
// profiler per device at a time (a second one throws tp::InvalidArgument naming the device).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensorpool/device/device.hpp"
#include "tensorpool/profile/device_recorder.hpp"
#include "tensorpool/profile/memory_snapshot.hpp"

namespace tp::profile {

struct ProfilerOptions {
  std::size_t max_events_per_device = std::size_t{1} << 16;  // ring size; older events are dropped, counted
  std::string oom_snapshot_path{};                           // empty: TP_OOM_SNAPSHOT when set, else no snapshot on OOM
};

struct MemoryInfo {
  std::size_t current = 0;  // bytes in use (after the allocator's rounding)
  std::size_t peak = 0;     // since creation or reset_memory_stats
  // The same for the device's shared (host-visible) memory, reported apart (Device::shared_memory(); 0 on
  // devices without it).
  std::size_t shared_current = 0;
  std::size_t shared_peak = 0;
};

class MemoryProfiler {
 public:
  explicit MemoryProfiler(std::vector<device::Device*> devices, ProfilerOptions options = {});
  ~MemoryProfiler();
  MemoryProfiler(const MemoryProfiler&) = delete;
  MemoryProfiler& operator=(const MemoryProfiler&) = delete;

  // Every recorded device, with its events, peak breakdown and high-water marks; each followed by its shared
  // memory's entry when it has one.
  [[nodiscard]] MemorySnapshot snapshot(std::string reason = "requested") const;
  // The planned peak a snapshot reports next to the measured one (from Session::plan, set by the caller).
  void set_planned_peak(const std::string& device, std::size_t bytes);
  const std::vector<device::Device*>& devices() const noexcept { return devices_; }
  const std::string& oom_snapshot_path() const noexcept { return oom_snapshot_path_; }

 private:
  struct Attachment;
  void write_oom_snapshot(const std::string& device) const noexcept;

  std::vector<device::Device*> devices_;
  std::string oom_snapshot_path_;
  std::int64_t epoch_ns_ = 0;
  std::vector<std::unique_ptr<Attachment>> attachments_;
};

[[nodiscard]] MemoryInfo memory_info(device::Device& device);
// The device's peaks (stack and recorder: breakdown, high-water marks; its shared memory's too) restart from
// the current values.
void reset_memory_stats(device::Device& device);
// A text table: rows in use, reserved, requested, largest free block, external and internal fragmentation
// (tensorpool/memory/fragmentation.hpp), allocs, OOMs, retries; columns current, peak, total allocated, total
// freed (totals of bytes need a recorder; without one they are counts or "-").
// Followed by one line on the device's shared memory (Device::shared_memory_note()) and, when it has one,
// its bytes in use, peak and reserved, counted apart from the table.
[[nodiscard]] std::string memory_summary(device::Device& device);
// Each device's segments, blocks and live tensors; the recorded parts for devices a profiler records. A device
// with shared memory is followed by that memory's entry.
[[nodiscard]] MemorySnapshot memory_snapshot(const std::vector<device::Device*>& devices,
                                             std::string reason = "requested");

// The stack's part of a device snapshot (figures, segments with blocks, live tensors from the tracking
// adaptor when no recorder filled them). Used by the functions above.
[[nodiscard]] DeviceSnapshot snapshot_device(device::Device& device, const DeviceRecorder* recorder);
// The same for the device's shared memory (`recorder` records that stack, or is null); shared_of is set.
// Requires device.shared_memory() != nullptr.
[[nodiscard]] DeviceSnapshot snapshot_shared_memory(device::Device& device, const DeviceRecorder* recorder);

}  // namespace tp::profile

// SPDX-License-Identifier: Apache-2.0
// tensorpool.memory and tensorpool.profiler's native side, over the library's memory reports (report/) and the
// profiler (profile/), so Python prints and writes what the CLI does: a device's summary table, the memory
// snapshot (as snapshot.json's JSON), a compiled model's per-tensor estimate and its memory summary after
// training, and a Profiler writing the files of `tensorpool train --profile DIR`. Device names are ours
// ("sim:0"); the devices are the process's DeviceManager's (Python configures them first: _runtime).
// Structured results cross as JSON text, which the Python side loads: one encoding, the files' own.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "python/bindings.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/memory_stats.hpp"
#include "tensorpool/profile/exporters.hpp"
#include "tensorpool/profile/memory_profiler.hpp"
#include "tensorpool/report/memory_estimate.hpp"
#include "tensorpool/report/memory_summary.hpp"
#include "tensorpool/report/profile_output.hpp"
#include "tensorpool/train/distribution_strategy.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::python {
namespace {

device::DeviceManager& manager_of(train::Sequential& model) {
  device::DeviceManager* given = model.session().options().devices;
  return given != nullptr ? *given : device::DeviceManager::instance();
}

// Where fit() assembles the model's batches (as train.cpp and `tensorpool train` choose): on the model's one
// device when it has shared memory and the strategy runs in this process alone, so a step reads them in
// place; cpu:0 otherwise. The plan depends on it (a batch fed in place takes no slot).
std::string batches_on(train::Sequential& model) {
  if (model.devices().size() == 1 && model.distribution().single_process()) {
    if (manager_of(model).device(model.devices().front()).shared_memory() != nullptr) return model.devices().front();
  }
  return "cpu:0";
}

void check_compiled(const train::Sequential& model, const char* what) {
  if (model.devices().empty()) {
    TP_THROW(InvalidArgument, "memory", what, ": the model is not compiled; call model.compile(...) first");
  }
}

void check_batch(std::int64_t batch_size, const char* what) {
  if (batch_size < 1) TP_THROW(InvalidArgument, "memory", what, ": batch_size ", batch_size, " must be >= 1");
}

// The named devices, or every device of the manager when `names` is empty.
std::vector<device::Device*> devices_of(const std::vector<std::string>& names) {
  device::DeviceManager& manager = device::DeviceManager::instance();
  return names.empty() ? manager.devices() : report::named_devices(manager, names);
}

nb::dict stats_dict(device::Device& device) {
  const memory::MemoryStats stats = device.memory().stats();
  nb::dict row;
  row["device"] = device.name();
  row["bytes_in_use"] = stats.bytes_in_use;
  row["peak_bytes_in_use"] = stats.peak_bytes_in_use;
  row["bytes_reserved"] = stats.bytes_reserved;
  row["peak_bytes_reserved"] = stats.peak_bytes_reserved;
  row["bytes_requested"] = stats.bytes_requested;
  row["peak_bytes_requested"] = stats.peak_bytes_requested;
  row["bytes_limit"] = stats.bytes_limit ? nb::cast(*stats.bytes_limit) : nb::none();
  row["largest_free_block"] = stats.largest_free_block;
  row["fragmentation"] = stats.fragmentation();
  row["internal_fragmentation_bytes"] = stats.internal_fragmentation_bytes();
  row["num_allocs"] = stats.num_allocs;
  row["num_frees"] = stats.num_frees;
  row["num_ooms"] = stats.num_ooms;
  row["num_retries"] = stats.num_retries;
  row["num_compactions"] = stats.num_compactions;
  row["bytes_compacted"] = stats.bytes_compacted;
  return row;
}

// A memory profiler over the given devices (and cpu:0, where feeds and fetches are staged), recording from
// construction until close(). A refused allocation writes `oom_snapshot_path` (when given) while everything
// live at the failure is still live. Owned through a unique_ptr so close() detaches at once, not whenever
// Python collects the object.
class Profiler {
 public:
  Profiler(const std::vector<std::string>& names, std::size_t max_events_per_device,
           const std::string& oom_snapshot_path) {
    std::vector<device::Device*> devices = devices_of(names);
    device::Device& host = device::DeviceManager::instance().device("cpu:0");
    bool has_host = false;
    for (const device::Device* device : devices) has_host = has_host || device == &host;
    if (!has_host) devices.push_back(&host);
    profiler_ = std::make_unique<profile::MemoryProfiler>(
        devices, profile::ProfilerOptions{.max_events_per_device = max_events_per_device,
                                          .oom_snapshot_path = oom_snapshot_path});
  }

  std::vector<std::string> devices() const {
    std::vector<std::string> names;
    for (const device::Device* device : recording().devices()) names.push_back(device->name());
    return names;
  }
  void set_planned_peaks(train::Sequential& model, std::int64_t batch_size) {
    check_compiled(model, "set_planned_peaks");
    check_batch(batch_size, "set_planned_peaks");
    report::set_planned_peaks(recording(), model.plan(batch_size, batches_on(model)));
  }
  std::string snapshot_json(const std::string& reason) const {
    return profile::snapshot_json(recording().snapshot(reason));
  }
  // The files of `tensorpool train --profile DIR`; returns summary.txt's text.
  std::string write(const std::string& directory, const std::string& reason) const {
    return report::write_profile(directory, recording().snapshot(reason));
  }
  void close() { profiler_.reset(); }
  bool closed() const { return profiler_ == nullptr; }

 private:
  const profile::MemoryProfiler& recording() const {
    if (profiler_ == nullptr) TP_THROW(InvalidArgument, "profiler", "the profiler is closed (its `with` block ended)");
    return *profiler_;
  }
  profile::MemoryProfiler& recording() {
    return const_cast<profile::MemoryProfiler&>(static_cast<const Profiler&>(*this).recording());
  }

  std::unique_ptr<profile::MemoryProfiler> profiler_;
};

}  // namespace

void bind_memory(nb::module_& module) {
  module.def(
      "memory_device_summary",
      [](const std::string& name) { return profile::memory_summary(device::DeviceManager::instance().device(name)); },
      nb::arg("device"), "the device's memory summary table (profile::memory_summary)");
  module.def(
      "memory_device_stats",
      [](const std::string& name) { return stats_dict(device::DeviceManager::instance().device(name)); },
      nb::arg("device"), "the device memory stack's counters, as a dict");
  module.def(
      "memory_device_names",
      [] {
        std::vector<std::string> names;
        for (const device::Device* device : device::DeviceManager::instance().devices())
          names.push_back(device->name());
        return names;
      },
      "the materialised devices' names, in the manager's order");
  module.def(
      "memory_snapshot_json",
      [](const std::vector<std::string>& names, const std::string& reason) {
        return profile::snapshot_json(profile::memory_snapshot(devices_of(names), reason));
      },
      nb::arg("devices"), nb::arg("reason"), "snapshot.json's JSON of the named devices (all when empty)");
  module.def(
      "memory_estimate",
      [](train::Sequential& model, std::int64_t batch_size) {
        check_compiled(model, "estimate");
        check_batch(batch_size, "estimate");
        const std::vector<device::Device*> devices = report::named_devices(manager_of(model), model.devices());
        const report::MemoryEstimate estimate =
            report::estimate_memory(model.plan(batch_size, batches_on(model)), model, devices, batch_size,
                                    {.arena_name = model.session().options().name + "/arena", .change = {}});
        std::ostringstream text;
        report::print_estimate(text, estimate);
        return nb::make_tuple(report::to_json(estimate).dump(), text.str());
      },
      nb::arg("model"), nb::arg("batch_size"),
      "the per-tensor estimate of one training step (JSON as `tensorpool estimate --json`, and its table)");
  module.def(
      "memory_model_summary",
      [](train::Sequential& model, std::int64_t batch_size) {
        check_compiled(model, "memory_summary");
        check_batch(batch_size, "memory_summary");
        const std::vector<report::DeviceSummary> summary = report::memory_summary(
            manager_of(model), model.devices(), model.plan(batch_size, batches_on(model)), model);
        return nb::make_tuple(report::summary_text(summary), report::to_json(summary).dump());
      },
      nb::arg("model"), nb::arg("batch_size"), "train's memory summary of the model's devices (text, JSON)");

  nb::class_<Profiler>(module, "MemoryProfiler", "profile::MemoryProfiler over the named devices and cpu:0")
      .def(nb::init<const std::vector<std::string>&, std::size_t, const std::string&>(), nb::arg("devices"),
           nb::arg("max_events_per_device"), nb::arg("oom_snapshot_path"))
      .def("devices", &Profiler::devices)
      .def("set_planned_peaks", &Profiler::set_planned_peaks, nb::arg("model"), nb::arg("batch_size"))
      .def("snapshot_json", &Profiler::snapshot_json, nb::arg("reason"))
      .def("write", &Profiler::write, nb::arg("directory"), nb::arg("reason"))
      .def("close", &Profiler::close)
      .def_prop_ro("closed", &Profiler::closed);
}

}  // namespace tp::python

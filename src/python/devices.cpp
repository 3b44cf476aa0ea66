// SPDX-License-Identifier: Apache-2.0
// The process's DeviceManager (device/device_manager.hpp) for python/tensorpool/_runtime.py and tf.config:
// the environment's device settings, the physical devices, the configuration calls (simulated devices, visible
// list, logical splits, memory growth), the devices once materialised and their memory counters. Device names
// are ours ("cpu:0", "sim:1"); the TensorFlow names and the checks TensorFlow makes live in Python. Every call
// that builds the devices (devices_info, device_memory_stats, reset_device_peak) materialises them.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "python/bindings.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/device/missing_device.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/memory_stats.hpp"

namespace tp::python {
namespace {

using device::DeviceId;
using device::DeviceManager;

std::vector<std::string> names_of(const std::vector<DeviceId>& ids) {
  std::vector<std::string> names;
  names.reserve(ids.size());
  for (const DeviceId& id : ids) names.push_back(id.str());
  return names;
}

std::vector<DeviceId> ids_of(const std::vector<std::string>& names, const char* what) {
  std::vector<DeviceId> ids;
  ids.reserve(names.size());
  for (const std::string& name : names) ids.push_back(device::parse_device_id(name, what));
  return ids;
}

// TP_SIM_DEVICES, TP_SIM_MEMORY, TP_OPENCL_DEVICES and TP_VISIBLE_DEVICES as DeviceManager::instance() reads
// them; tp::InvalidArgument naming a bad one.
device::DeviceManagerOptions environment() {
  device::DeviceManagerOptions options;
  device::apply_device_env(options, ::getenv);
  return options;
}

nb::dict info_dict(const device::DeviceInfo& info) {
  nb::dict row;
  row["name"] = info.name;
  row["kind"] = info.kind;
  row["physical"] = info.physical;
  row["capacity_bytes"] = info.capacity_bytes;
  row["limit_bytes"] = info.limit_bytes;
  row["in_use_bytes"] = info.in_use_bytes;
  row["reserved_bytes"] = info.reserved_bytes;
  row["peak_in_use_bytes"] = info.peak_in_use_bytes;
  row["allocator"] = info.allocator;
  row["policy"] = info.policy;
  row["streams"] = info.streams;
  row["staging"] = info.staging;
  return row;
}

}  // namespace

void bind_devices(nb::module_& module) {
  module.def(
      "device_env",
      [] {
        const device::DeviceManagerOptions options = environment();
        nb::dict env;
        env["sim_devices_set"] = std::getenv("TP_SIM_DEVICES") != nullptr;
        env["sim_devices"] = options.sim_devices;
        env["sim_memory_bytes"] = options.sim_memory_bytes;
        env["visible_devices"] =
            options.visible_devices ? nb::cast(names_of(*options.visible_devices)) : nb::object(nb::none());
        return env;
      },
      "The device settings of the environment (TP_SIM_DEVICES, TP_SIM_MEMORY, TP_VISIBLE_DEVICES), as "
      "DeviceManager::instance() reads them.");
  module.def(
      "physical_devices",
      [](int sim_devices, std::size_t sim_memory_bytes) {
        // A manager of its own with the environment's settings, `sim_devices` simulated devices and no visible
        // list or split: its plan is the physical list (cpu:0, sim:N, opencl:N), planned without building.
        device::DeviceManagerOptions options = environment();
        options.sim_devices = sim_devices;
        options.sim_memory_bytes = sim_memory_bytes;
        options.visible_devices.reset();
        const DeviceManager planner(std::move(options), ::getenv);
        return names_of(planner.planned_devices());
      },
      nb::arg("sim_devices"), nb::arg("sim_memory_bytes"),
      "The physical devices (before the visible list and logical splits) with this many simulated devices.");
  module.def(
      "plan_devices",
      [](int sim_devices, std::size_t sim_memory_bytes, const std::optional<std::vector<std::string>>& visible,
         const std::vector<std::pair<std::string, std::vector<std::size_t>>>& splits) {
        // As physical_devices, with a visible list and splits: the devices this configuration would give,
        // checked as materialising would check it, without touching the process's manager.
        device::DeviceManagerOptions options = environment();
        options.sim_devices = sim_devices;
        options.sim_memory_bytes = sim_memory_bytes;
        if (visible) {
          options.visible_devices = ids_of(*visible, "visible device");
        } else {
          options.visible_devices.reset();
        }
        for (const auto& [name, limits] : splits) {
          std::vector<device::LogicalDeviceConfig> logical;
          for (const std::size_t bytes : limits) logical.push_back({.memory_limit_bytes = bytes});
          options.splits[device::parse_device_id(name, "split device")] = std::move(logical);
        }
        const DeviceManager planner(std::move(options), ::getenv);
        return names_of(planner.planned_devices());
      },
      nb::arg("sim_devices"), nb::arg("sim_memory_bytes"), nb::arg("visible").none(), nb::arg("splits"),
      "The devices a configuration gives (visible: physical names, None for all; splits: (visible name, "
      "limits in bytes)), planned and checked without building; tp::InvalidArgument names what is wrong.");
  module.def(
      "missing_device_advice",
      [](const std::string& name, const std::vector<std::string>& existing) {
        return device::missing_device_advice(device::parse_device_id(name, "device"), ids_of(existing, "device"),
                                             {.use = "", .sim_note = "(before the process first uses its devices)"});
      },
      nb::arg("name"), nb::arg("existing"),
      "\"this process has ...; <the setting that gives `name`>\": `tensorpool train --devices`'s advice "
      "(device/missing_device.hpp).");
  module.def("opencl_unavailable_reason", &device::opencl_unavailable_reason);

  module.def(
      "env_memory_growth",
      []() -> std::optional<bool> {
        if (std::getenv("TP_ALLOW_GROWTH") == nullptr) return std::nullopt;
        const memory::MemoryConfig config =
            memory::apply_env_overrides(device::DeviceManagerOptions::default_device_memory_config(), ::getenv);
        return config.policy == memory::GrowthPolicy::grow;
      },
      "TP_ALLOW_GROWTH as the devices will read it (None when unset); tp::InvalidArgument for a bad value.");
  module.def("devices_initialised", [] { return DeviceManager::instance().initialised(); });
  module.def(
      "set_sim_devices",
      [](int count, std::size_t memory_bytes) { DeviceManager::instance().set_sim_devices(count, memory_bytes); },
      nb::arg("count"), nb::arg("memory_bytes"));
  module.def(
      "set_visible_devices",
      [](const std::vector<std::string>& names) {
        DeviceManager::instance().set_visible_devices(ids_of(names, "visible device"));
      },
      nb::arg("names"));
  module.def(
      "set_logical_devices",
      [](const std::string& visible_device, const std::vector<std::size_t>& memory_limits_bytes) {
        std::vector<device::LogicalDeviceConfig> logical;
        logical.reserve(memory_limits_bytes.size());
        for (const std::size_t bytes : memory_limits_bytes) logical.push_back({.memory_limit_bytes = bytes});
        DeviceManager::instance().set_logical_devices(device::parse_device_id(visible_device, "split device"),
                                                      std::move(logical));
      },
      nb::arg("visible_device"), nb::arg("memory_limits_bytes"));
  module.def(
      "set_memory_growth",
      [](const std::string& name, bool grow) {
        const device::DeviceId id = device::parse_device_id(name, "device");
        memory::MemoryConfig config = device::DeviceManagerOptions::default_device_memory_config();
        config.policy = grow ? memory::GrowthPolicy::grow : memory::GrowthPolicy::preallocate;
        config.allocator = device::default_allocator(id.kind, config.policy);
        DeviceManager::instance().set_memory_config(id, std::move(config));
      },
      nb::arg("name"), nb::arg("grow"),
      "The default device memory config (tracked) with growth on (the expandable arena) or off (preallocation, "
      "BFC), for one device.");
  module.def("planned_devices", [] { return names_of(DeviceManager::instance().planned_devices()); });

  module.def(
      "devices_info",
      [] {
        nb::list rows;
        for (const device::DeviceInfo& info : DeviceManager::instance().info()) rows.append(info_dict(info));
        return rows;
      },
      "Materialises the devices; one dict per device (name, kind, physical, capacity_bytes, limit_bytes, "
      "in_use_bytes, reserved_bytes, peak_in_use_bytes, allocator, policy, streams, staging).");
  module.def(
      "device_memory_stats",
      [](const std::string& name) {
        const memory::MemoryStats stats = DeviceManager::instance().device(name).memory().stats();
        return std::pair<std::size_t, std::size_t>(stats.bytes_in_use, stats.peak_bytes_in_use);
      },
      nb::arg("name"), "(bytes in use, peak bytes in use) of the device's memory stack; materialises the devices.");
  module.def(
      "reset_device_peak",
      [](const std::string& name) { DeviceManager::instance().device(name).memory().reset_peak(); }, nb::arg("name"),
      "Restarts the device's peak counters from the current values.");
}

}  // namespace tp::python

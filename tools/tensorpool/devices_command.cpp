// SPDX-License-Identifier: Apache-2.0
// tensorpool devices [--json] [--sim-devices N] [--sim-memory BYTES] [--allocate BYTES]
// Lists the devices the DeviceManager builds from the environment (TP_SIM_DEVICES, TP_SIM_MEMORY,
// TP_OPENCL_DEVICES, TP_VISIBLE_DEVICES and the memory overrides), with each one's memory figures; --json
// adds the kind of host memory staging each device's copies (Device::staging_kind()), what each opencl
// device's driver reports (name, vendor, driver, memory, compute units, SVM, fp64) and what each cuda device's
// GPU reports (name, compute capability, total and free memory, multiprocessors, memory features).
// --sim-devices and --sim-memory override the environment for this command. --allocate is a probe: it
// allocates that many bytes on every accelerator (tag "devices/probe", kind temporary) and holds them while
// printing, so the live figures (in use, reserved, peak) show what one allocation costs on each device's stack.
// Bad input throws tp::InvalidArgument, which main() turns into exit code 2 and a one-line message.
#include <algorithm>
#include <charconv>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/memory/memory_resource.hpp"

namespace tp::cli {
namespace {

struct DevicesArguments {
  std::string sim_devices;
  std::string sim_memory;
  std::string allocate;
  bool json = false;
};

int parse_sim_devices(const std::string& text) {
  int count = -1;
  const auto [ptr, error] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (text.empty() || error != std::errc{} || ptr != text.data() + text.size() || count < 0 ||
      count > device::kMaxSimDevices) {
    TP_THROW(InvalidArgument, "devices", "--sim-devices '", text, "' is not a count; write an integer from 0 to ",
             device::kMaxSimDevices);
  }
  return count;
}

std::size_t parse_sim_memory(const std::string& text) {
  const std::size_t bytes = parse_bytes(text, "--sim-memory");
  if (bytes < device::kMinSimMemoryBytes || bytes > memory::kMaxAllocationBytes) {
    TP_THROW(InvalidArgument, "devices", "--sim-memory ", text, " is outside [2MiB, ",
             format_bytes(memory::kMaxAllocationBytes), "]; give each simulated device's memory, e.g. 1GiB");
  }
  return bytes;
}

std::size_t parse_allocate(const std::string& text) {
  const std::size_t bytes = parse_bytes(text, "--allocate");
  if (bytes == 0) {
    TP_THROW(InvalidArgument, "devices", "--allocate ", text, " is zero bytes; give a size such as 10MiB");
  }
  return bytes;
}

device::DeviceManagerOptions resolve_options(const DevicesArguments& arguments) {
  device::DeviceManagerOptions options;
  device::apply_device_env(options, ::getenv);
  if (!arguments.sim_devices.empty()) options.sim_devices = parse_sim_devices(arguments.sim_devices);
  if (!arguments.sim_memory.empty()) options.sim_memory_bytes = parse_sim_memory(arguments.sim_memory);
  return options;
}

// Allocates `bytes` on every accelerator (none when 0); the buffers live as long as the returned list.
std::vector<std::shared_ptr<Buffer>> probe(device::DeviceManager& manager, std::size_t bytes) {
  if (bytes == 0) return {};
  memory::AllocationTag tag;
  tag.name = "devices/probe";
  tag.kind = memory::AllocationKind::temporary;
  std::vector<std::shared_ptr<Buffer>> buffers;
  for (device::Device* device : manager.devices()) {
    if (device->kind() == device::DeviceKind::cpu) continue;
    const std::size_t limit = device->memory().limit_bytes();
    if (bytes > limit) {
      TP_THROW(InvalidArgument, "devices", "--allocate ", format_bytes(bytes), " exceeds ", device->name(),
               "'s memory limit of ", format_bytes(limit), "; probe with a smaller size");
    }
    buffers.push_back(device->allocate(bytes, tag));
  }
  return buffers;
}

void print_table(const std::vector<device::DeviceInfo>& devices) {
  const std::vector<std::string> header{"name",     "kind", "physical",  "capacity", "limit",  "in use",
                                        "reserved", "peak", "allocator", "policy",   "streams"};
  std::vector<std::vector<std::string>> rows;
  for (const device::DeviceInfo& info : devices) {
    rows.push_back({info.name, info.kind, info.physical, format_bytes(info.capacity_bytes),
                    format_bytes(info.limit_bytes), format_bytes(info.in_use_bytes), format_bytes(info.reserved_bytes),
                    format_bytes(info.peak_in_use_bytes), info.allocator, info.policy, std::to_string(info.streams)});
  }
  std::vector<std::size_t> widths(header.size());
  for (std::size_t column = 0; column < header.size(); ++column) {
    widths[column] = header[column].size();
    for (const auto& row : rows) widths[column] = std::max(widths[column], row[column].size());
  }
  // Names and words left-aligned, sizes and counts right-aligned.
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t column = 0; column < row.size(); ++column) {
      const bool left = column < 3 || column == 8 || column == 9;
      line += column == 0 ? "" : "  ";
      line += left ? fmt::format("{:<{}}", row[column], widths[column])
                   : fmt::format("{:>{}}", row[column], widths[column]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << '\n';
  };
  print_row(header);
  for (const auto& row : rows) print_row(row);
}

void print_json(const std::vector<device::DeviceInfo>& devices) {
  nlohmann::ordered_json output;
  output["devices"] = nlohmann::ordered_json::array();
  for (const device::DeviceInfo& info : devices) {
    nlohmann::ordered_json entry = {
        {"name", info.name},
        {"kind", info.kind},
        {"physical", info.physical},
        {"capacity_bytes", info.capacity_bytes},
        {"limit_bytes", info.limit_bytes},
        {"in_use_bytes", info.in_use_bytes},
        {"reserved_bytes", info.reserved_bytes},
        {"peak_in_use_bytes", info.peak_in_use_bytes},
        {"allocator", info.allocator},
        {"policy", info.policy},
        {"streams", info.streams},
        {"staging", info.staging},
    };
    if (info.opencl.has_value()) {
      const device::OpenClProperties& opencl = *info.opencl;
      entry["opencl"] = {
          {"name", opencl.name},
          {"vendor", opencl.vendor},
          {"platform", opencl.platform},
          {"device_version", opencl.device_version},
          {"driver_version", opencl.driver_version},
          {"global_memory_bytes", opencl.global_memory_bytes},
          {"max_allocation_bytes", opencl.max_allocation_bytes},
          {"compute_units", opencl.compute_units},
          {"svm",
           {{"coarse_grain_buffer", opencl.svm_coarse_grain_buffer},
            {"fine_grain_buffer", opencl.svm_fine_grain_buffer},
            {"fine_grain_system", opencl.svm_fine_grain_system}}},
          {"fp64", opencl.fp64},
      };
    }
    if (info.cuda.has_value()) {
      const device::CudaProperties& cuda = *info.cuda;
      entry["cuda"] = {
          {"name", cuda.name},
          {"ordinal", cuda.ordinal},
          {"compute_capability", fmt::format("{}.{}", cuda.compute_major, cuda.compute_minor)},
          {"total_bytes", cuda.total_bytes},
          {"free_bytes", cuda.free_bytes},
          {"multiprocessors", cuda.multiprocessors},
          {"l2_bytes", cuda.l2_bytes},
          {"managed_memory", cuda.managed_memory},
          {"concurrent_managed_access", cuda.concurrent_managed_access},
          {"virtual_memory_management", cuda.virtual_memory_management},
          {"memory_pools", cuda.memory_pools},
      };
    }
    output["devices"].push_back(std::move(entry));
  }
  std::cout << output.dump(2) << '\n';
}

void run_devices(const DevicesArguments& arguments) {
  const device::DeviceManagerOptions options = resolve_options(arguments);
  const std::size_t probe_bytes = arguments.allocate.empty() ? 0 : parse_allocate(arguments.allocate);
  // A manager of our own rather than instance(): the overrides apply to this command only.
  device::DeviceManager manager(options, ::getenv);
  // Declared after the manager, so the probe buffers go back before their devices are destroyed.
  const std::vector<std::shared_ptr<Buffer>> buffers = probe(manager, probe_bytes);
  const std::vector<device::DeviceInfo> devices = manager.info();
  if (arguments.json) {
    print_json(devices);
  } else {
    print_table(devices);
  }
}

}  // namespace

void add_devices_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "devices",
      "List the devices (cpu, simulated, OpenCL and CUDA accelerators after visible-device filtering) and their "
      "memory");
  auto arguments = std::make_shared<DevicesArguments>();
  command->add_flag("--json", arguments->json, "print JSON (snake_case keys, bytes as integers)");
  command
      ->add_option("--sim-devices", arguments->sim_devices,
                   "number of simulated accelerators, 0 to 64 (overrides TP_SIM_DEVICES)")
      ->type_name("N");
  command
      ->add_option("--sim-memory", arguments->sim_memory,
                   "memory of each simulated accelerator, e.g. 1GiB (overrides TP_SIM_MEMORY)")
      ->type_name("BYTES");
  command
      ->add_option("--allocate", arguments->allocate,
                   "probe: allocate this many bytes on each accelerator before printing, e.g. 10MiB")
      ->type_name("BYTES");
  command->callback([arguments] { run_devices(*arguments); });
}

}  // namespace tp::cli

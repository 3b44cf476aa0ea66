// SPDX-License-Identifier: Apache-2.0
// DeviceManager: configuration is plain data until the first devices()/device()/info() call, which plans the
// device list (physical -> visible -> logical, see the header) and builds every device through the backend
// factories. Planning is a pure function of the options, so a failed plan or build leaves no devices behind
// and the manager still configurable.
#include "tensorpool/device/device_manager.hpp"

#include <algorithm>
#include <limits>
#include <mutex>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/memory_stack.hpp"

namespace tp::device {
namespace {

// One device to build: its final id, the physical device behind it, and the bytes it may use.
struct PlannedDevice {
  DeviceId id;
  DeviceId physical;
  std::size_t capacity_bytes = 0;
};

std::string join(const std::vector<DeviceId>& ids) {
  if (ids.empty()) return "none";
  std::string text;
  for (const DeviceId& id : ids) text += (text.empty() ? "" : ", ") + id.str();
  return text;
}

std::string_view policy_name(memory::GrowthPolicy policy) noexcept {
  return policy == memory::GrowthPolicy::grow ? "grow" : "preallocate";
}

void validate_sim_devices(int count, std::size_t memory_bytes) {
  if (count < 0 || count > kMaxSimDevices) {
    TP_THROW(InvalidArgument, "device", "sim_devices = ", count, " is outside 0..", kMaxSimDevices,
             "; ask for at most ", kMaxSimDevices, " simulated devices");
  }
  if (memory_bytes < kMinSimMemoryBytes || memory_bytes > memory::kMaxAllocationBytes) {
    TP_THROW(InvalidArgument, "device", "sim_memory_bytes = ", memory_bytes, " is outside [", kMinSimMemoryBytes, ", ",
             memory::kMaxAllocationBytes, "]; give each simulated device's memory in bytes, e.g. 1 GiB = ", kGiB);
  }
}

void validate_visible(const std::vector<DeviceId>& visible) {
  for (std::size_t i = 0; i < visible.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (visible[i] == visible[j]) {
        TP_THROW(InvalidArgument, "device", "visible devices (", join(visible), ") list ", visible[i].str(),
                 " twice; list each device once");
      }
    }
  }
}

void validate_split(const DeviceId& device, const std::vector<LogicalDeviceConfig>& logical) {
  if (logical.empty()) {
    TP_THROW(InvalidArgument, "device", "the logical split of ", device.str(),
             " is empty; give at least one logical device with its memory limit");
  }
  for (std::size_t i = 0; i < logical.size(); ++i) {
    if (logical[i].memory_limit_bytes == 0) {
      TP_THROW(InvalidArgument, "device", "logical device ", i, " of ", device.str(),
               " has a memory limit of 0 bytes; give each logical device a positive limit");
    }
  }
}

void validate_opencl_devices(const std::optional<int>& count) {
  if (count.has_value() && (*count < 0 || *count > kMaxOpenClDevices)) {
    TP_THROW(InvalidArgument, "device", "opencl_devices = ", *count, " is outside 0..", kMaxOpenClDevices,
             "; ask for at most ", kMaxOpenClDevices, " OpenCL devices, or leave it unset for one per device found");
  }
}

// The opencl devices before visible-device filtering: one per physical device the ICD loader reports, or
// `opencl_devices` of them in turn over the physical ones, each physical device's memory shared evenly.
std::vector<PlannedDevice> plan_opencl(const std::optional<int>& opencl_devices) {
  validate_opencl_devices(opencl_devices);
  if (opencl_devices == 0) return {};
  const std::vector<OpenClProperties>& found = opencl_physical_devices();
  const int physical_count = static_cast<int>(found.size());
  if (physical_count == 0) return {};
  const int count = opencl_devices.value_or(physical_count);
  std::vector<PlannedDevice> planned;
  for (int index = 0; index < count; ++index) {
    const int physical = index % physical_count;
    const int sharing = count / physical_count + (physical < count % physical_count ? 1 : 0);
    const std::size_t memory = found[static_cast<std::size_t>(physical)].global_memory_bytes;
    planned.push_back(
        {{DeviceKind::opencl, index}, {DeviceKind::opencl, physical}, memory / static_cast<std::size_t>(sharing)});
  }
  return planned;
}

void validate_cuda_planning(int count, std::size_t capacity_bytes) {
  if (count < 1 || count > kMaxSimDevices) {
    TP_THROW(InvalidArgument, "device", "planning-only cuda devices: count = ", count, " is outside 1..",
             kMaxSimDevices, "; plan for at most ", kMaxSimDevices, " GPUs");
  }
  if (capacity_bytes == 0 || capacity_bytes > memory::kMaxAllocationBytes) {
    TP_THROW(InvalidArgument, "device", "planning-only cuda devices: capacity_bytes = ", capacity_bytes,
             " is outside (0, ", memory::kMaxAllocationBytes, "]; give each GPU's memory in bytes");
  }
}

// Whether the cuda devices are planning-only ones: asked for, and no GPU to plan on instead.
bool plans_cuda_only(const DeviceManagerOptions& options) {
  return options.cuda_devices && options.cuda_planning.has_value() && cuda_physical_devices().empty();
}

// The cuda devices before visible-device filtering: one per GPU the CUDA runtime reports (after
// CUDA_VISIBLE_DEVICES), each with the GPU's whole memory; logical splits (step 3) share one out. Without a
// GPU, the planning-only devices when asked for (DeviceManagerOptions::cuda_planning).
std::vector<PlannedDevice> plan_cuda(const DeviceManagerOptions& options) {
  std::vector<PlannedDevice> planned;
  if (!options.cuda_devices) return planned;  // the runtime is not asked at all
  if (plans_cuda_only(options)) {
    for (int index = 0; index < options.cuda_planning->count; ++index) {
      const DeviceId id{DeviceKind::cuda, index};
      planned.push_back({id, id, options.cuda_planning->capacity_bytes});
    }
    return planned;
  }
  const std::vector<CudaProperties>& found = cuda_physical_devices();
  for (std::size_t index = 0; index < found.size(); ++index) {
    const DeviceId id{DeviceKind::cuda, static_cast<int>(index)};
    planned.push_back({id, id, found[index].total_bytes});
  }
  return planned;
}

// Why a visible entry of `kind` names no physical device, with the setting that gives more.
std::string visible_hint(DeviceKind kind, const DeviceManagerOptions& options) {
  if (kind == DeviceKind::opencl) {
    return " (TP_OPENCL_DEVICES sets how many OpenCL devices there are; " +
           (opencl_physical_devices().empty()
                ? opencl_unavailable_reason()
                : std::string("the ICD loader reports ") + std::to_string(opencl_physical_devices().size())) +
           ")";
  }
  if (kind == DeviceKind::cuda && !options.cuda_devices) {
    return " (the cuda devices are off: DeviceManagerOptions::cuda_devices = false)";
  }
  if (kind == DeviceKind::cuda) {
    return " (" +
           (cuda_physical_devices().empty()
                ? cuda_unavailable_reason()
                : "the CUDA runtime reports " + std::to_string(cuda_physical_devices().size()) +
                      " GPUs after CUDA_VISIBLE_DEVICES; a logical split gives more cuda devices") +
           ")";
  }
  return " (TP_SIM_DEVICES sets how many simulated devices there are)";
}

// Step 1 and 2 of the header: cpu:0 (always), then the visible accelerators renumbered per kind in the
// order listed (all of them, in physical order, when no visible list is set).
std::vector<PlannedDevice> plan_visible(const DeviceManagerOptions& options, std::size_t cpu_capacity) {
  std::vector<PlannedDevice> physical;
  for (int index = 0; index < options.sim_devices; ++index) {
    physical.push_back({{DeviceKind::sim, index}, {DeviceKind::sim, index}, options.sim_memory_bytes});
  }
  for (const PlannedDevice& device : plan_opencl(options.opencl_devices)) physical.push_back(device);
  for (const PlannedDevice& device : plan_cuda(options)) physical.push_back(device);
  std::vector<PlannedDevice> visible{{{DeviceKind::cpu, 0}, {DeviceKind::cpu, 0}, cpu_capacity}};
  if (!options.visible_devices) {
    visible.insert(visible.end(), physical.begin(), physical.end());
    return visible;
  }
  validate_visible(*options.visible_devices);
  std::map<DeviceKind, int> next_index;
  for (const DeviceId& wanted : *options.visible_devices) {
    if (wanted == DeviceId{DeviceKind::cpu, 0}) continue;  // cpu:0 is always visible
    const auto found = std::find_if(physical.begin(), physical.end(),
                                    [&](const PlannedDevice& device) { return device.id == wanted; });
    if (found == physical.end()) {
      std::vector<DeviceId> existing{{DeviceKind::cpu, 0}};
      for (const PlannedDevice& device : physical) existing.push_back(device.id);
      TP_THROW(InvalidArgument, "device", "visible device ", wanted.str(), " does not exist; the physical devices are ",
               join(existing), visible_hint(wanted.kind, options));
    }
    visible.push_back({{wanted.kind, next_index[wanted.kind]++}, found->physical, found->capacity_bytes});
  }
  return visible;
}

// Step 3: each visible device, or each of its logical devices, numbered in sequence per kind.
std::vector<PlannedDevice> plan_devices(const DeviceManagerOptions& options, std::size_t cpu_capacity) {
  const std::vector<PlannedDevice> visible = plan_visible(options, cpu_capacity);
  for (const auto& [device, logical] : options.splits) {
    const bool exists = std::ranges::find(visible, device, &PlannedDevice::id) != visible.end();
    if (!exists) {
      std::vector<DeviceId> existing;
      for (const PlannedDevice& planned : visible) existing.push_back(planned.id);
      TP_THROW(InvalidArgument, "device", "cannot split ", device.str(),
               ": no such visible device; the visible devices are ", join(existing));
    }
    validate_split(device, logical);
  }
  std::vector<PlannedDevice> planned;
  std::map<DeviceKind, int> next_index;
  for (const PlannedDevice& device : visible) {
    const auto split = options.splits.find(device.id);
    if (split == options.splits.end()) {
      planned.push_back({{device.id.kind, next_index[device.id.kind]++}, device.physical, device.capacity_bytes});
      continue;
    }
    std::size_t sum = 0;
    for (const LogicalDeviceConfig& logical : split->second) {
      // Saturates instead of wrapping, so an absurd sum still fails the check below.
      sum = logical.memory_limit_bytes > std::numeric_limits<std::size_t>::max() - sum
                ? std::numeric_limits<std::size_t>::max()
                : sum + logical.memory_limit_bytes;
    }
    if (sum > device.capacity_bytes) {
      TP_THROW(InvalidArgument, "device", "the logical devices of ", device.id.str(), " (physical ",
               device.physical.str(), ") ask for ", format_bytes(sum), " (", sum, " bytes) in all, more than its ",
               format_bytes(device.capacity_bytes), " (", device.capacity_bytes,
               " bytes); lower their memory limits so they fit");
    }
    for (const LogicalDeviceConfig& logical : split->second) {
      planned.push_back({{device.id.kind, next_index[device.id.kind]++}, device.physical, logical.memory_limit_bytes});
    }
  }
  return planned;
}

// The whole plan: the simulated devices checked, cpu:0's capacity found, then plan_devices.
std::vector<PlannedDevice> plan_all(const DeviceManagerOptions& options) {
  validate_sim_devices(options.sim_devices, options.sim_memory_bytes);
  const std::size_t cpu_capacity =
      options.cpu_memory_bytes != 0 ? options.cpu_memory_bytes : memory::host_physical_memory_bytes();
  if (cpu_capacity == 0) {
    TP_THROW(InvalidArgument, "device",
             "the host's physical memory is unknown, so cpu:0 has no budget; set "
             "DeviceManagerOptions::cpu_memory_bytes");
  }
  return plan_devices(options, cpu_capacity);
}

// How to get a device of `id`'s kind: simulated ones are configured, CUDA ones need a backend this build lacks.
std::string missing_device_hint(const DeviceId& id) {
  if (id.kind == DeviceKind::sim) {
    return " (TP_SIM_DEVICES or DeviceManager::set_sim_devices sets how many simulated devices there are)";
  }
  if (id.kind == DeviceKind::opencl) {
    const std::string reason = opencl_unavailable_reason();
    return reason.empty() ? " (TP_OPENCL_DEVICES sets how many OpenCL devices there are)" : " (" + reason + ")";
  }
  if (id.kind == DeviceKind::cuda) {
    const std::string reason = cuda_unavailable_reason();
    return reason.empty() ? " (one cuda device per GPU the CUDA runtime reports; a logical split gives more)"
                          : " (" + reason + ")";
  }
  return "";
}

}  // namespace

memory::MemoryConfig DeviceManagerOptions::default_device_memory_config() {
  memory::MemoryConfig config;
  // Grow on demand, unlike TensorFlow's preallocation: several logical devices and processes can then share
  // a device without each taking its whole budget up front (TP_ALLOW_GROWTH=false restores preallocation,
  // with BFC: default_allocator).
  config.policy = memory::GrowthPolicy::grow;
  config.allocator = memory::AllocatorKind::expandable;
  config.tracking = true;
  return config;
}

memory::AllocatorKind default_allocator(DeviceKind kind, memory::GrowthPolicy policy) noexcept {
  const bool maps_pages = kind != DeviceKind::opencl;
  return policy == memory::GrowthPolicy::grow && maps_pages ? memory::AllocatorKind::expandable
                                                            : memory::AllocatorKind::bfc;
}

memory::AllocatorKind cuda_allocator_for(memory::AllocatorKind requested, const CudaProperties& gpu) noexcept {
  if (requested == memory::AllocatorKind::expandable && !gpu.virtual_memory_management) {
    return memory::AllocatorKind::bfc;
  }
  return requested;
}

DeviceManager::DeviceManager(DeviceManagerOptions options, memory::GetEnv get_env)
    : options_(std::move(options)), get_env_(std::move(get_env)) {
  if (!get_env_) get_env_ = [](const char*) -> const char* { return nullptr; };
}

DeviceManager::~DeviceManager() {
  // Accelerators before cpu:0, newest first, the reverse of their construction.
  while (!devices_.empty()) devices_.pop_back();
}

DeviceManager& DeviceManager::instance() {
  // Built (and the environment read) at the first call; a bad variable throws here, and the next call
  // tries again.
  static DeviceManager manager(
      [] {
        DeviceManagerOptions options;
        apply_device_env(options, ::getenv);
        return options;
      }(),
      ::getenv);
  return manager;
}

void DeviceManager::check_not_initialised(std::string_view what) const {
  if (!initialised_) return;
  std::vector<DeviceId> existing;
  for (const auto& device : devices_) existing.push_back(device->id());
  TP_THROW(InvalidArgument, "device", "cannot set ", what, ": devices are already initialised (", join(existing),
           "); configure them before their first use");
}

void DeviceManager::set_sim_devices(int count, std::size_t memory_bytes) {
  const std::lock_guard lock(mutex_);
  check_not_initialised("the simulated devices");
  validate_sim_devices(count, memory_bytes);
  options_.sim_devices = count;
  options_.sim_memory_bytes = memory_bytes;
}

void DeviceManager::set_opencl_devices(std::optional<int> count) {
  const std::lock_guard lock(mutex_);
  check_not_initialised("the opencl devices");
  validate_opencl_devices(count);
  options_.opencl_devices = count;
}

void DeviceManager::set_cuda_devices(bool enabled) {
  const std::lock_guard lock(mutex_);
  check_not_initialised("the cuda devices");
  options_.cuda_devices = enabled;
}

void DeviceManager::set_cuda_planning_devices(int count, std::size_t capacity_bytes, std::string source) {
  const std::lock_guard lock(mutex_);
  check_not_initialised("the planning-only cuda devices");
  validate_cuda_planning(count, capacity_bytes);
  options_.cuda_planning = DeviceManagerOptions::CudaPlanning{count, capacity_bytes, std::move(source)};
}

void DeviceManager::set_visible_devices(std::vector<DeviceId> visible) {
  const std::lock_guard lock(mutex_);
  check_not_initialised("the visible devices");
  validate_visible(visible);
  options_.visible_devices = std::move(visible);
}

void DeviceManager::set_logical_devices(DeviceId visible_device, std::vector<LogicalDeviceConfig> logical) {
  const std::lock_guard lock(mutex_);
  check_not_initialised("the logical devices of " + visible_device.str());
  validate_split(visible_device, logical);
  options_.splits[visible_device] = std::move(logical);
}

void DeviceManager::set_memory_config(DeviceId device, memory::MemoryConfig config) {
  const std::lock_guard lock(mutex_);
  check_not_initialised("the memory config of " + device.str());
  config.device = device.str();
  config.validate();
  options_.memory_configs[device] = std::move(config);
}

void DeviceManager::set_device_options(DeviceOptions options) {
  const std::lock_guard lock(mutex_);
  check_not_initialised("the device options");
  if (options.num_streams == 0) {
    TP_THROW(InvalidArgument, "device", "DeviceOptions::num_streams = 0; every device needs at least one stream");
  }
  options_.device_options = std::move(options);
}

std::vector<DeviceId> DeviceManager::planned_devices() const {
  const std::lock_guard lock(mutex_);
  std::vector<DeviceId> ids;
  if (initialised_) {
    for (const auto& device : devices_) ids.push_back(device->id());
    return ids;
  }
  for (const PlannedDevice& device : plan_all(options_)) ids.push_back(device.id);
  return ids;
}

void DeviceManager::materialise() {
  if (initialised_) return;
  const std::vector<PlannedDevice> plan = plan_all(options_);
  for (const auto& [id, config] : options_.memory_configs) {
    const bool exists = std::ranges::find(plan, id, &PlannedDevice::id) != plan.end();
    if (!exists) {
      std::vector<DeviceId> existing;
      for (const PlannedDevice& device : plan) existing.push_back(device.id);
      TP_THROW(InvalidArgument, "device", "device ", id.str(),
               " does not exist (a memory config names it); the devices are ", join(existing), missing_device_hint(id));
    }
  }
  // Built into a local list: if one device fails, the ones built so far are destroyed and nothing changes.
  std::vector<std::unique_ptr<Device>> built;
  for (const PlannedDevice& device : plan) {
    const auto configured = options_.memory_configs.find(device.id);
    const bool own_config = configured != options_.memory_configs.end();
    memory::MemoryConfig config = own_config ? configured->second : options_.default_memory_config;
    config.device = device.id.str();
    memory::AllocatorKind configured_allocator = config.allocator;
    // TP_ALLOCATOR=cuda_malloc_async|managed (and an oversubscribing TP_MEMORY_FRACTION with it) concern the cuda
    // devices; the others keep their configured allocator and budget, said once.
    bool cuda_only_hidden = false;
    config = memory::apply_env_overrides(std::move(config),
                                         device.id.kind == DeviceKind::cuda
                                             ? get_env_
                                             : memory::env_without_cuda_only_overrides(get_env_, &cuda_only_hidden));
    if (cuda_only_hidden) {
      static std::once_flag said_cuda_only;
      std::call_once(said_cuda_only, [&] {
        TP_LOG(info, "device", "TP_ALLOCATOR=", get_env_("TP_ALLOCATOR"),
               " applies to cuda devices only; the other devices keep their configured allocator");
      });
    }
    if (!own_config && configured_allocator == memory::AllocatorKind::expandable) {
      // The default's arena where it applies; BFC for a preallocated budget (TP_ALLOW_GROWTH=false) or opencl.
      configured_allocator = default_allocator(device.id.kind, config.policy);
      if (get_env_("TP_ALLOCATOR") == nullptr || cuda_only_hidden) config.allocator = configured_allocator;
    }
    if (device.id.kind == DeviceKind::opencl && config.allocator == memory::AllocatorKind::expandable &&
        configured_allocator != memory::AllocatorKind::expandable) {
      // TP_ALLOCATOR is process-wide, and OpenCL cannot map pages into a reserved range: its devices keep the
      // allocator configured for them (a MemoryConfig that asks for expandable itself is refused).
      config.allocator = configured_allocator;
      static std::once_flag said;
      std::call_once(said, [&] {
        TP_LOG(warning, "device",
               "TP_ALLOCATOR=expandable does not apply to OpenCL devices (no page mapping); they keep allocator ",
               memory::to_string(configured_allocator));
      });
    }
    if (device.id.kind == DeviceKind::cpu) {
      built.push_back(
          make_cpu_device(device.id, device.physical, device.capacity_bytes, config, options_.device_options));
    } else if (device.id.kind == DeviceKind::opencl) {
      built.push_back(
          make_opencl_device(device.id, device.physical, device.capacity_bytes, config, options_.device_options));
    } else if (device.id.kind == DeviceKind::cuda && plans_cuda_only(options_)) {
      const std::string note = "planning only: no GPU was present (" + cuda_unavailable_reason() +
                               "); the capacity of physical " + device.physical.str() + ", " +
                               format_bytes(options_.cuda_planning->capacity_bytes) + ", came from " +
                               options_.cuda_planning->source;
      built.push_back(
          make_cuda_planning_device(device.id, device.capacity_bytes, config, options_.device_options, note));
    } else if (device.id.kind == DeviceKind::cuda) {
      const std::vector<CudaProperties>& found = cuda_physical_devices();
      const auto physical = static_cast<std::size_t>(device.physical.index);
      if (physical < found.size()) {
        const memory::AllocatorKind usable = cuda_allocator_for(config.allocator, found[physical]);
        if (usable != config.allocator) {
          TP_LOG(warning, "device", device.id.str(), ": allocator ", memory::to_string(config.allocator), " needs ",
                 "CUDA virtual memory management, which ", found[physical].name, " (", device.physical.str(),
                 ") does not support; using ", memory::to_string(usable),
                 " (cudaMalloc regions) instead; choose bfc or cuda_malloc_async (--allocator, TP_ALLOCATOR) to "
                 "silence this");
          config.allocator = usable;
        }
      }
      built.push_back(
          make_cuda_device(device.id, device.physical, device.capacity_bytes, config, options_.device_options));
    } else {
      built.push_back(
          make_sim_device(device.id, device.physical, device.capacity_bytes, config, options_.device_options));
    }
  }
  devices_ = std::move(built);
  initialised_ = true;
}

std::vector<Device*> DeviceManager::devices() {
  const std::lock_guard lock(mutex_);
  materialise();
  std::vector<Device*> result;
  for (const auto& device : devices_) result.push_back(device.get());
  return result;
}

std::vector<Device*> DeviceManager::devices(DeviceKind kind) {
  const std::lock_guard lock(mutex_);
  materialise();
  std::vector<Device*> result;
  for (const auto& device : devices_) {
    if (device->kind() == kind) result.push_back(device.get());
  }
  return result;
}

Device& DeviceManager::device(DeviceId id) {
  const std::lock_guard lock(mutex_);
  materialise();
  for (const auto& device : devices_) {
    if (device->id() == id) return *device;
  }
  std::vector<DeviceId> existing;
  for (const auto& device : devices_) existing.push_back(device->id());
  TP_THROW(InvalidArgument, "device", "device ", id.str(), " does not exist; the devices are ", join(existing),
           missing_device_hint(id));
}

std::vector<DeviceInfo> DeviceManager::info() {
  const std::lock_guard lock(mutex_);
  materialise();
  std::vector<DeviceInfo> result;
  for (const auto& device : devices_) {
    const memory::MemoryStack& stack = device->memory();
    const memory::MemoryStats stats = stack.stats();
    DeviceInfo info;
    info.name = device->name();
    info.kind = std::string(to_string(device->kind()));
    info.physical = device->physical_id().str();
    info.capacity_bytes = device->capacity_bytes();
    info.limit_bytes = stack.limit_bytes();
    info.in_use_bytes = stats.bytes_in_use;
    info.reserved_bytes = stats.bytes_reserved;
    info.peak_in_use_bytes = stats.peak_bytes_in_use;
    info.allocator = std::string(memory::to_string(stack.config().allocator));
    info.policy = std::string(policy_name(stack.config().policy));
    info.streams = device->num_streams();
    info.staging = device->staging_kind();
    if (device->kind() == DeviceKind::opencl) {
      const std::vector<OpenClProperties>& found = opencl_physical_devices();
      const auto physical = static_cast<std::size_t>(device->physical_id().index);
      if (physical < found.size()) info.opencl = found[physical];
    }
    if (device->kind() == DeviceKind::cuda) {
      const std::vector<CudaProperties>& found = cuda_physical_devices();
      const auto physical = static_cast<std::size_t>(device->physical_id().index);
      if (physical < found.size()) {
        info.cuda = found[physical];
        try {
          info.cuda->free_bytes = cuda_free_bytes(info.cuda->ordinal);
        } catch (const DeviceError& error) {  // the figures are still worth printing without it
          TP_LOG(warning, "device", device->name(), ": free memory unknown: ", error.what());
        }
      }
    }
    result.push_back(std::move(info));
  }
  return result;
}

bool DeviceManager::initialised() const {
  const std::lock_guard lock(mutex_);
  return initialised_;
}

}  // namespace tp::device

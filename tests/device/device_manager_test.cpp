// SPDX-License-Identifier: Apache-2.0
// DeviceManager and apply_device_env: the environment variables, visible-device filtering and reordering,
// logical splits with their limits, per-device memory configs, and configuration after first use. Every
// manager here gets an injected environment, so the tests do not depend on the caller's TP_* variables.
#include "tensorpool/device/device_manager.hpp"
#include "device/fake_env.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::device {
namespace {

using testing::env_of;
using testing::Variables;

const memory::GetEnv kNoEnv = env_of({});

DeviceId sim(int index) { return {DeviceKind::sim, index}; }
DeviceId cpu(int index) { return {DeviceKind::cpu, index}; }

// `count` simulated devices of 64 MiB and a 64 MiB cpu:0, so nothing depends on the host's RAM, and no OpenCL
// or CUDA devices, so nothing depends on its drivers and GPUs (tests/device/opencl_device_test.cpp and
// tests/backend/cuda/ cover those).
DeviceManagerOptions small_options(int count) {
  DeviceManagerOptions options;
  options.opencl_devices = 0;
  options.cuda_devices = false;
  options.sim_devices = count;
  options.sim_memory_bytes = 64 * kMiB;
  options.cpu_memory_bytes = 64 * kMiB;
  return options;
}

std::vector<std::string> names(const std::vector<Device*>& devices) {
  std::vector<std::string> result;
  for (const Device* device : devices) result.push_back(device->name());
  return result;
}

// The message of the tp::InvalidArgument `action` throws ("" when it does not throw).
template <typename Action>
std::string invalid_argument_message(Action&& action) {
  try {
    action();
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected tp::InvalidArgument";
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(DeviceEnv, ReadsEachVariable) {
  DeviceManagerOptions options;
  apply_device_env(options, env_of({{"TP_SIM_DEVICES", " 3 "},
                                    {"TP_SIM_MEMORY", "512MiB"},
                                    {"TP_VISIBLE_DEVICES", "sim:2, sim:0"},
                                    {"TP_GEMM", "openblas"}}));
  EXPECT_EQ(options.device_options.kernels.gemm_library, "openblas");
  EXPECT_EQ(options.sim_devices, 3);
  EXPECT_EQ(options.sim_memory_bytes, 512 * kMiB);
  ASSERT_TRUE(options.visible_devices.has_value());
  EXPECT_EQ(*options.visible_devices, (std::vector<DeviceId>{sim(2), sim(0)}));
}

TEST(DeviceEnv, UnsetVariablesKeepTheOptions) {
  DeviceManagerOptions options;
  options.sim_devices = 2;
  options.sim_memory_bytes = 8 * kMiB;
  apply_device_env(options, kNoEnv);
  EXPECT_EQ(options.sim_devices, 2);
  EXPECT_EQ(options.sim_memory_bytes, 8 * kMiB);
  EXPECT_FALSE(options.visible_devices.has_value());
}

TEST(DeviceEnv, EmptyVisibleDevicesHidesEveryAccelerator) {
  for (const char* value : {"", "  "}) {
    DeviceManagerOptions options = small_options(2);
    apply_device_env(options, env_of({{"TP_VISIBLE_DEVICES", value}}));
    ASSERT_TRUE(options.visible_devices.has_value());
    EXPECT_TRUE(options.visible_devices->empty());
    DeviceManager manager(options, kNoEnv);
    EXPECT_EQ(names(manager.devices()), std::vector<std::string>{"cpu:0"});
  }
}

TEST(DeviceEnv, BadValuesNameTheVariableTheValueAndTheAcceptedForm) {
  struct Case {
    const char* variable;
    const char* value;
  };
  const Case cases[] = {
      {"TP_SIM_DEVICES", "-1"},
      {"TP_SIM_DEVICES", "65"},
      {"TP_SIM_DEVICES", "two"},
      {"TP_SIM_DEVICES", ""},
      {"TP_SIM_DEVICES", "3x"},
      {"TP_SIM_DEVICES", "2.5"},
      {"TP_SIM_MEMORY", "lots"},
      {"TP_SIM_MEMORY", "0"},
      {"TP_SIM_MEMORY", ""},
      {"TP_SIM_MEMORY", "1KiB"},
      {"TP_SIM_MEMORY", "-1GiB"},
      {"TP_SIM_MEMORY", "12XB"},
      {"TP_VISIBLE_DEVICES", "sim:0,,sim:1"},
      {"TP_VISIBLE_DEVICES", "sim:0,"},
      {"TP_VISIBLE_DEVICES", ","},
      {"TP_VISIBLE_DEVICES", "gpu:0"},
      {"TP_VISIBLE_DEVICES", "sim:-1"},
      {"TP_VISIBLE_DEVICES", "sim:1,sim:1"},
      {"TP_GEMM", "mkl"},
      {"TP_GEMM", ""},
      {"TP_GEMM", "Auto"},
  };
  for (const Case& c : cases) {
    DeviceManagerOptions options = small_options(1);
    const std::string message = invalid_argument_message([&] {
      apply_device_env(options, env_of({{c.variable, c.value}}));
    });
    EXPECT_TRUE(contains(message, std::string(c.variable) + "='" + c.value + "'")) << message;
    EXPECT_TRUE(contains(message, "accepted:")) << message;
    // Nothing is applied when a variable is bad.
    EXPECT_EQ(options.sim_devices, 1) << c.variable << "=" << c.value;
    EXPECT_EQ(options.sim_memory_bytes, 64 * kMiB);
    EXPECT_FALSE(options.visible_devices.has_value());
    EXPECT_TRUE(options.device_options.kernels.gemm_library.empty());
  }
}

TEST(DeviceManager, ListsCpuThenSimDevicesWithGrowingTrackedExpandableStacks) {
  DeviceManager manager(small_options(2), kNoEnv);
  EXPECT_FALSE(manager.initialised());
  const std::vector<Device*> devices = manager.devices();
  EXPECT_TRUE(manager.initialised());
  ASSERT_EQ(names(devices), (std::vector<std::string>{"cpu:0", "sim:0", "sim:1"}));
  for (const Device* device : devices) {
    const memory::MemoryConfig& config = device->memory().config();
    EXPECT_EQ(config.device, device->name());
    EXPECT_EQ(config.allocator, memory::AllocatorKind::expandable);
    EXPECT_EQ(config.policy, memory::GrowthPolicy::grow);
    EXPECT_TRUE(config.tracking);
    EXPECT_EQ(device->physical_id(), device->id());
    EXPECT_EQ(device->capacity_bytes(), 64 * kMiB);
    EXPECT_EQ(device->memory().limit_bytes(), 64 * kMiB);
  }
  EXPECT_EQ(names(manager.devices(DeviceKind::sim)), (std::vector<std::string>{"sim:0", "sim:1"}));
  EXPECT_EQ(names(manager.devices(DeviceKind::cuda)), std::vector<std::string>{});
  EXPECT_EQ(&manager.device("sim:1"), devices[2]);
  EXPECT_EQ(&manager.device(cpu(0)), devices[0]);
}

TEST(DeviceManager, VisibleDevicesReorderAndRenumberTheAccelerators) {
  DeviceManagerOptions options = small_options(2);
  apply_device_env(options, env_of({{"TP_VISIBLE_DEVICES", "sim:1,sim:0"}}));
  DeviceManager manager(options, kNoEnv);
  ASSERT_EQ(names(manager.devices()), (std::vector<std::string>{"cpu:0", "sim:0", "sim:1"}));
  Device& first = manager.device("sim:0");
  Device& second = manager.device("sim:1");
  EXPECT_EQ(first.physical_id(), sim(1));
  EXPECT_EQ(second.physical_id(), sim(0));
  // Each has its own memory: an allocation on one leaves the other untouched.
  EXPECT_NE(&first.memory(), &second.memory());
  const auto buffer = first.allocate(8 * kMiB);
  EXPECT_GE(first.memory().stats().bytes_in_use, 8 * kMiB);
  EXPECT_EQ(second.memory().stats().bytes_in_use, 0u);
  const std::vector<DeviceInfo> info = manager.info();
  ASSERT_EQ(info.size(), 3u);
  EXPECT_EQ(info[1].name, "sim:0");
  EXPECT_EQ(info[1].physical, "sim:1");
  EXPECT_EQ(info[2].physical, "sim:0");
}

TEST(DeviceManager, VisibleDevicesHideTheOthers) {
  DeviceManager manager(small_options(3), kNoEnv);
  manager.set_visible_devices({cpu(0), sim(2)});  // cpu:0 may be named; it is always visible
  ASSERT_EQ(names(manager.devices()), (std::vector<std::string>{"cpu:0", "sim:0"}));
  EXPECT_EQ(manager.device("sim:0").physical_id(), sim(2));
  const std::string message = invalid_argument_message([&] { manager.device("sim:1"); });
  EXPECT_TRUE(contains(message, "sim:1 does not exist")) << message;
  EXPECT_TRUE(contains(message, "cpu:0, sim:0")) << message;
}

TEST(DeviceManager, VisibleDeviceThatDoesNotExistListsThePhysicalOnesAndLeavesTheManagerConfigurable) {
  DeviceManager manager(small_options(2), kNoEnv);
  for (const DeviceId& missing : {sim(2), DeviceId{DeviceKind::cuda, 0}, cpu(1)}) {
    manager.set_visible_devices({sim(0), missing});
    const std::string message = invalid_argument_message([&] { manager.devices(); });
    EXPECT_TRUE(contains(message, "visible device " + missing.str() + " does not exist")) << message;
    EXPECT_TRUE(contains(message, "cpu:0, sim:0, sim:1")) << message;
    EXPECT_FALSE(manager.initialised());
  }
  manager.set_visible_devices({sim(1)});
  EXPECT_EQ(names(manager.devices()), (std::vector<std::string>{"cpu:0", "sim:0"}));
}

TEST(DeviceManager, DuplicateVisibleDevicesAreRejected) {
  DeviceManager manager(small_options(2), kNoEnv);
  EXPECT_TRUE(contains(invalid_argument_message([&] {
                         manager.set_visible_devices({sim(0), sim(1), sim(0)});
                       }),
                       "sim:0 twice"));
  DeviceManagerOptions options = small_options(2);
  options.visible_devices = std::vector<DeviceId>{sim(1), sim(1)};
  DeviceManager direct(options, kNoEnv);
  EXPECT_TRUE(contains(invalid_argument_message([&] { direct.devices(); }), "sim:1 twice"));
}

TEST(DeviceManager, UnknownDeviceErrorListsTheDevicesThatExist) {
  DeviceManager manager(small_options(2), kNoEnv);
  const std::string message = invalid_argument_message([&] { manager.device("sim:9"); });
  EXPECT_TRUE(contains(message, "sim:9 does not exist")) << message;
  EXPECT_TRUE(contains(message, "cpu:0, sim:0, sim:1")) << message;
  EXPECT_TRUE(contains(invalid_argument_message([&] { manager.device("gpu:0"); }), "gpu:0"));
}

TEST(DeviceManager, LogicalDevicesEnforceTheirOwnLimits) {
  DeviceManager manager(small_options(1), kNoEnv);
  manager.set_logical_devices(sim(0), {{16 * kMiB}, {32 * kMiB}});
  ASSERT_EQ(names(manager.devices()), (std::vector<std::string>{"cpu:0", "sim:0", "sim:1"}));
  Device& small = manager.device("sim:0");
  Device& large = manager.device("sim:1");
  EXPECT_EQ(small.physical_id(), sim(0));
  EXPECT_EQ(large.physical_id(), sim(0));
  EXPECT_EQ(small.capacity_bytes(), 16 * kMiB);
  EXPECT_EQ(large.capacity_bytes(), 32 * kMiB);
  EXPECT_EQ(small.memory().limit_bytes(), 16 * kMiB);
  EXPECT_EQ(large.memory().limit_bytes(), 32 * kMiB);

  EXPECT_THROW(small.allocate(20 * kMiB), OutOfMemoryError);
  const auto held = large.allocate(20 * kMiB);  // the sibling still has its own 32 MiB
  EXPECT_NE(held, nullptr);
  const auto fits = small.allocate(8 * kMiB);  // and the device that refused stays usable
  EXPECT_NE(fits, nullptr);
}

TEST(DeviceManager, LogicalDevicesAreNumberedInSequenceWithTheirKind) {
  DeviceManager manager(small_options(2), kNoEnv);
  manager.set_logical_devices(sim(0), {{8 * kMiB}, {8 * kMiB}});
  const std::vector<Device*> devices = manager.devices();
  ASSERT_EQ(names(devices), (std::vector<std::string>{"cpu:0", "sim:0", "sim:1", "sim:2"}));
  EXPECT_EQ(devices[1]->physical_id(), sim(0));
  EXPECT_EQ(devices[2]->physical_id(), sim(0));
  EXPECT_EQ(devices[3]->physical_id(), sim(1));
  EXPECT_EQ(devices[3]->capacity_bytes(), 64 * kMiB);
}

TEST(DeviceManager, SplitsAreKeyedByTheVisibleId) {
  DeviceManager manager(small_options(2), kNoEnv);
  manager.set_visible_devices({sim(1), sim(0)});
  manager.set_logical_devices(sim(1), {{4 * kMiB}, {4 * kMiB}});  // visible sim:1 is physical sim:0
  const std::vector<Device*> devices = manager.devices();
  ASSERT_EQ(names(devices), (std::vector<std::string>{"cpu:0", "sim:0", "sim:1", "sim:2"}));
  EXPECT_EQ(devices[1]->physical_id(), sim(1));
  EXPECT_EQ(devices[2]->physical_id(), sim(0));
  EXPECT_EQ(devices[3]->physical_id(), sim(0));
  EXPECT_EQ(devices[3]->capacity_bytes(), 4 * kMiB);
}

TEST(DeviceManager, BadSplitsAreRejectedNamingTheDevice) {
  DeviceManager manager(small_options(1), kNoEnv);
  EXPECT_TRUE(contains(invalid_argument_message([&] {
                         manager.set_logical_devices(sim(0), {{8 * kMiB}, {0}});
                       }),
                       "logical device 1 of sim:0 has a memory limit of 0"));
  EXPECT_TRUE(contains(invalid_argument_message([&] { manager.set_logical_devices(sim(0), {}); }), "empty"));

  manager.set_logical_devices(sim(0), {{48 * kMiB}, {32 * kMiB}});
  std::string message = invalid_argument_message([&] { manager.devices(); });
  EXPECT_TRUE(contains(message, "sim:0")) << message;
  EXPECT_TRUE(contains(message, "80.00 MiB")) << message;  // the sum
  EXPECT_TRUE(contains(message, "64.00 MiB")) << message;  // the capacity
  EXPECT_FALSE(manager.initialised());

  DeviceManager other(small_options(1), kNoEnv);
  other.set_logical_devices(sim(3), {{8 * kMiB}});
  message = invalid_argument_message([&] { other.devices(); });
  EXPECT_TRUE(contains(message, "cannot split sim:3")) << message;
  EXPECT_TRUE(contains(message, "cpu:0, sim:0")) << message;

  DeviceManagerOptions options = small_options(1);
  options.splits[sim(0)] = {{kMiB}, {0}};  // set directly, it is checked when the devices are built
  DeviceManager direct(options, kNoEnv);
  EXPECT_TRUE(contains(invalid_argument_message([&] { direct.devices(); }), "memory limit of 0"));
}

TEST(DeviceManager, CpuCanBeSplitToo) {
  DeviceManager manager(small_options(0), kNoEnv);
  manager.set_logical_devices(cpu(0), {{16 * kMiB}, {16 * kMiB}});
  const std::vector<Device*> devices = manager.devices();
  ASSERT_EQ(names(devices), (std::vector<std::string>{"cpu:0", "cpu:1"}));
  for (const Device* device : devices) {
    EXPECT_TRUE(device->host_accessible());
    EXPECT_EQ(device->capacity_bytes(), 16 * kMiB);
    EXPECT_EQ(device->memory().limit_bytes(), 16 * kMiB);
    EXPECT_EQ(device->physical_id(), cpu(0));
  }
  EXPECT_THROW(devices[0]->allocate(20 * kMiB), OutOfMemoryError);
  EXPECT_NE(devices[1]->allocate(8 * kMiB), nullptr);
}

TEST(DeviceManager, PerDeviceMemoryConfigIsHonoured) {
  DeviceManager manager(small_options(2), kNoEnv);
  memory::MemoryConfig bfc = DeviceManagerOptions::default_device_memory_config();
  bfc.allocator = memory::AllocatorKind::bfc;
  bfc.fraction = 0.5;
  manager.set_memory_config(sim(1), bfc);
  EXPECT_EQ(manager.device("sim:0").memory().config().allocator, memory::AllocatorKind::expandable);
  EXPECT_EQ(manager.device("sim:0").memory().limit_bytes(), 64 * kMiB);
  const memory::MemoryStack& stack = manager.device("sim:1").memory();
  EXPECT_EQ(stack.config().allocator, memory::AllocatorKind::bfc);
  EXPECT_EQ(stack.config().device, "sim:1");
  EXPECT_EQ(stack.limit_bytes(), 32 * kMiB);
  EXPECT_EQ(manager.info()[2].allocator, "bfc");
}

TEST(DeviceManager, MemoryConfigForAMissingDeviceIsAnError) {
  DeviceManager manager(small_options(1), kNoEnv);
  manager.set_memory_config(sim(5), DeviceManagerOptions::default_device_memory_config());
  const std::string message = invalid_argument_message([&] { manager.devices(); });
  EXPECT_TRUE(contains(message, "device sim:5 does not exist")) << message;
  EXPECT_TRUE(contains(message, "cpu:0, sim:0")) << message;
  EXPECT_TRUE(contains(message, "TP_SIM_DEVICES")) << message;  // how to get it
}

// Issue 18: callers check a device exists before configuring it, without building any.
TEST(DeviceManager, PlannedDevicesAreTheIdsWithoutBuildingThem) {
  DeviceManager manager(small_options(3), kNoEnv);
  manager.set_visible_devices({sim(2), sim(0)});
  EXPECT_EQ(manager.planned_devices(), (std::vector<DeviceId>{cpu(0), sim(0), sim(1)}));
  EXPECT_FALSE(manager.initialised());
  manager.set_sim_devices(1, 64 * kMiB);  // still configurable; now sim:2 is missing
  EXPECT_TRUE(contains(invalid_argument_message([&] { (void)manager.planned_devices(); }), "sim:2 does not exist"));
  manager.set_visible_devices({sim(0)});
  EXPECT_EQ(names(manager.devices()), (std::vector<std::string>{"cpu:0", "sim:0"}));
  EXPECT_EQ(manager.planned_devices(), (std::vector<DeviceId>{cpu(0), sim(0)}));
}

TEST(DeviceManager, MemoryEnvironmentOverridesApplyToEveryDevice) {
  DeviceManager manager(small_options(1), env_of({{"TP_ALLOCATOR", "system"}, {"TP_ALLOW_GROWTH", "false"}}));
  for (const DeviceInfo& info : manager.info()) {
    EXPECT_EQ(info.allocator, "system") << info.name;
    EXPECT_EQ(info.policy, "preallocate") << info.name;
  }
  DeviceManager bad(small_options(1), env_of({{"TP_ALLOCATOR", "tlsf"}}));
  EXPECT_TRUE(contains(invalid_argument_message([&] { bad.devices(); }), "TP_ALLOCATOR='tlsf'"));
  EXPECT_FALSE(bad.initialised());
}

// TP_ALLOCATOR is process-wide: a CUDA-only value (and managed memory's oversubscribing fraction) leaves the
// cpu and sim devices on their configured allocator and budget instead of refusing them; a device's own
// MemoryConfig asking for one is still refused, naming the device.
TEST(DeviceManager, CudaOnlyAllocatorsInTheEnvironmentLeaveOtherDevicesAlone) {
  for (const char* allocator : {"cuda_malloc_async", "managed", " Managed "}) {
    DeviceManager manager(small_options(1), env_of({{"TP_ALLOCATOR", allocator}, {"TP_MEMORY_FRACTION", "1.5"}}));
    const std::vector<DeviceInfo> info = manager.info();
    ASSERT_EQ(info.size(), 2u) << allocator;
    for (const DeviceInfo& device : info) EXPECT_EQ(device.allocator, "expandable") << device.name << allocator;
  }
  // Without a CUDA-only allocator a fraction above 1 is still an error.
  DeviceManager oversubscribed(small_options(1), env_of({{"TP_MEMORY_FRACTION", "1.5"}}));
  EXPECT_TRUE(contains(invalid_argument_message([&] { oversubscribed.devices(); }), "TP_MEMORY_FRACTION='1.5'"));
  DeviceManager own(small_options(1), kNoEnv);
  memory::MemoryConfig managed = DeviceManagerOptions::default_device_memory_config();
  managed.allocator = memory::AllocatorKind::managed;
  EXPECT_TRUE(contains(invalid_argument_message([&] { own.set_memory_config(sim(0), managed); }), "sim:0"));
}

// Issue 23: the default allocator follows the growth policy. Growing, the expandable arena (reserved follows
// the plan); preallocating, BFC (TensorFlow's behaviour), unless TP_ALLOCATOR or the device's own config
// chooses; a config that names expandable for itself keeps it.
TEST(DeviceManager, TheDefaultAllocatorIsTheArenaWhenGrowingAndBfcWhenPreallocating) {
  EXPECT_EQ(default_allocator(DeviceKind::sim, memory::GrowthPolicy::grow), memory::AllocatorKind::expandable);
  EXPECT_EQ(default_allocator(DeviceKind::cpu, memory::GrowthPolicy::grow), memory::AllocatorKind::expandable);
  EXPECT_EQ(default_allocator(DeviceKind::sim, memory::GrowthPolicy::preallocate), memory::AllocatorKind::bfc);
  EXPECT_EQ(default_allocator(DeviceKind::opencl, memory::GrowthPolicy::grow), memory::AllocatorKind::bfc);

  DeviceManager preallocated(small_options(2), env_of({{"TP_ALLOW_GROWTH", "false"}}));
  memory::MemoryConfig own = DeviceManagerOptions::default_device_memory_config();
  own.policy = memory::GrowthPolicy::preallocate;
  preallocated.set_memory_config(sim(1), own);
  const std::vector<DeviceInfo> info = preallocated.info();
  ASSERT_EQ(info.size(), 3u);
  EXPECT_EQ(info[1].allocator, "bfc");
  EXPECT_EQ(info[1].policy, "preallocate");
  EXPECT_EQ(info[2].allocator, "expandable");  // chosen by its own config
  EXPECT_EQ(info[2].policy, "preallocate");

  DeviceManager chosen(small_options(1), env_of({{"TP_ALLOW_GROWTH", "false"}, {"TP_ALLOCATOR", "expandable"}}));
  EXPECT_EQ(chosen.info()[1].allocator, "expandable");
}

TEST(DeviceManager, ConfigurationAfterFirstUseFails) {
  DeviceManager manager(small_options(1), kNoEnv);
  manager.set_sim_devices(2, 32 * kMiB);  // before first use: fine
  ASSERT_EQ(manager.devices().size(), 3u);
  struct Case {
    std::function<void()> configure;
    const char* setting;
  };
  const Case cases[] = {
      {[&] { manager.set_sim_devices(1, 32 * kMiB); }, "the simulated devices"},
      {[&] { manager.set_opencl_devices(0); }, "the opencl devices"},
      {[&] { manager.set_visible_devices({sim(0)}); }, "the visible devices"},
      {[&] { manager.set_logical_devices(sim(0), {{kMiB}}); }, "the logical devices of sim:0"},
      {[&] { manager.set_memory_config(sim(0), {}); }, "the memory config of sim:0"},
      {[&] { manager.set_device_options({}); }, "the device options"},
  };
  for (const Case& c : cases) {
    const std::string message = invalid_argument_message(c.configure);
    EXPECT_TRUE(contains(message, std::string("cannot set ") + c.setting)) << message;
    EXPECT_TRUE(contains(message, "already initialised")) << message;
    EXPECT_TRUE(contains(message, "before their first use")) << message;
  }
  EXPECT_EQ(manager.devices().size(), 3u);
  EXPECT_EQ(manager.device("sim:1").capacity_bytes(), 32 * kMiB);
}

TEST(DeviceManager, BadConfigurationValuesAreRejected) {
  DeviceManager manager(small_options(1), kNoEnv);
  EXPECT_TRUE(contains(invalid_argument_message([&] { manager.set_sim_devices(65, kGiB); }), "sim_devices = 65"));
  EXPECT_TRUE(contains(invalid_argument_message([&] { manager.set_sim_devices(-1, kGiB); }), "sim_devices = -1"));
  EXPECT_TRUE(contains(invalid_argument_message([&] { manager.set_sim_devices(1, kKiB); }), "sim_memory_bytes"));
  EXPECT_TRUE(contains(invalid_argument_message([&] { manager.set_opencl_devices(kMaxOpenClDevices + 1); }),
                       "opencl_devices = " + std::to_string(kMaxOpenClDevices + 1)));
  EXPECT_TRUE(contains(invalid_argument_message([&] { manager.set_opencl_devices(-1); }), "opencl_devices = -1"));
  EXPECT_TRUE(
      contains(invalid_argument_message([&] { manager.set_device_options({.num_streams = 0}); }), "num_streams"));
  memory::MemoryConfig both;
  both.fraction = 0.5;
  both.limit_bytes = kMiB;
  EXPECT_TRUE(contains(invalid_argument_message([&] { manager.set_memory_config(sim(0), both); }), "sim:0"));
}

TEST(DeviceManager, InfoReportsLiveMemoryFigures) {
  DeviceManager manager(small_options(1), kNoEnv);
  manager.set_device_options({.num_streams = 2});
  const auto buffer = manager.device("sim:0").allocate(4 * kMiB);
  const std::vector<DeviceInfo> info = manager.info();
  ASSERT_EQ(info.size(), 2u);
  const DeviceInfo& sim0 = info[1];
  EXPECT_EQ(sim0.name, "sim:0");
  EXPECT_EQ(sim0.kind, "sim");
  EXPECT_EQ(sim0.physical, "sim:0");
  EXPECT_EQ(sim0.capacity_bytes, 64 * kMiB);
  EXPECT_EQ(sim0.limit_bytes, 64 * kMiB);
  EXPECT_GE(sim0.in_use_bytes, 4 * kMiB);
  EXPECT_GE(sim0.reserved_bytes, sim0.in_use_bytes);
  EXPECT_GE(sim0.peak_in_use_bytes, sim0.in_use_bytes);
  EXPECT_EQ(sim0.allocator, "expandable");
  EXPECT_EQ(sim0.policy, "grow");
  EXPECT_EQ(sim0.streams, 2u);
  EXPECT_EQ(info[0].in_use_bytes, 0u);
}

TEST(DeviceManager, ConcurrentFirstUseBuildsOneSetOfDevices) {
  DeviceManager manager(small_options(2), kNoEnv);
  std::vector<std::vector<Device*>> seen(8);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < seen.size(); ++i) threads.emplace_back([&, i] { seen[i] = manager.devices(); });
  for (std::thread& thread : threads) thread.join();
  for (const auto& devices : seen) EXPECT_EQ(devices, seen[0]);
}

// Issue 20: the expandable arena maps pages with CUDA's virtual memory management; a cuda device on a GPU
// without it builds BFC instead (logged), so the default allocator never makes such a GPU unusable. Every
// other request, and every request on a GPU with it, is kept.
TEST(DeviceManager, CudaWithoutVirtualMemoryFallsBackFromTheArenaToBfc) {
  CudaProperties without_vmm;
  without_vmm.virtual_memory_management = false;
  CudaProperties with_vmm;
  with_vmm.virtual_memory_management = true;
  const memory::AllocatorKind grown = default_allocator(DeviceKind::cuda, memory::GrowthPolicy::grow);
  ASSERT_EQ(grown, memory::AllocatorKind::expandable);
  EXPECT_EQ(cuda_allocator_for(grown, without_vmm), memory::AllocatorKind::bfc);
  EXPECT_EQ(cuda_allocator_for(grown, with_vmm), memory::AllocatorKind::expandable);
  for (const memory::AllocatorKind kept : {memory::AllocatorKind::bfc, memory::AllocatorKind::system,
                                           memory::AllocatorKind::cuda_malloc_async, memory::AllocatorKind::managed}) {
    EXPECT_EQ(cuda_allocator_for(kept, without_vmm), kept);
    EXPECT_EQ(cuda_allocator_for(kept, with_vmm), kept);
  }
}

TEST(DeviceManager, InstanceIsOneManager) { EXPECT_EQ(&DeviceManager::instance(), &DeviceManager::instance()); }

}  // namespace
}  // namespace tp::device

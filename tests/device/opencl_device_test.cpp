// SPDX-License-Identifier: Apache-2.0
// The opencl backend through the public device API: discovery (the DeviceManager lists every OpenCL device
// as opencl:N, TP_OPENCL_DEVICES makes N logical devices, TP_VISIBLE_DEVICES filters them), the memory stack
// on an OpenCL device (stats, limits, the OOM report, trim, tags, refusal of `expandable`), copies host <->
// device and device <-> device, and that host code cannot touch device memory. Skips, saying why, when this
// build or machine has no OpenCL device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "device/fake_env.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/tensor.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::device {
namespace {

using testing::env_of;
using testing::Variables;

// The options the process-wide manager would read from `variables`.
DeviceManagerOptions options_of(const Variables& variables) {
  DeviceManagerOptions options;
  apply_device_env(options, env_of(variables));
  return options;
}

memory::MemoryConfig config_of(memory::AllocatorKind allocator, std::size_t limit_bytes) {
  memory::MemoryConfig config;
  config.device = "opencl:0";
  config.allocator = allocator;
  config.policy = memory::GrowthPolicy::grow;
  config.limit_bytes = limit_bytes;
  config.tracking = true;
  return config;
}

class OpenClDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (opencl_physical_devices().empty()) GTEST_SKIP() << "no OpenCL device: " << opencl_unavailable_reason();
  }
  static std::unique_ptr<Device> make(memory::AllocatorKind allocator = memory::AllocatorKind::bfc,
                                      std::size_t limit_bytes = 64 * kMiB, DeviceOptions options = {}, int index = 0) {
    memory::MemoryConfig config = config_of(allocator, limit_bytes);
    config.device = "opencl:" + std::to_string(index);
    return make_opencl_device({DeviceKind::opencl, index}, {DeviceKind::opencl, 0}, 256 * kMiB, config, options);
  }
};

TEST(OpenClDeviceId, ParsesAndPrintsTheOpenClKind) {
  EXPECT_EQ(parse_device_id("opencl:1"), (DeviceId{DeviceKind::opencl, 1}));
  EXPECT_EQ(parse_device_id(" opencl "), (DeviceId{DeviceKind::opencl, 0}));
  EXPECT_EQ((DeviceId{DeviceKind::opencl, 2}).str(), "opencl:2");
  try {
    (void)parse_device_id("gpu:0");
    FAIL() << "gpu:0 parsed";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("cpu, sim, opencl or cuda"), std::string::npos) << error.what();
  }
}

TEST(OpenClDiscovery, EveryDeviceTheIcdLoaderReportsIsListedUnlessHidden) {
  DeviceManager manager(options_of({}), env_of({}));
  const std::vector<Device*> opencl = manager.devices(DeviceKind::opencl);
  ASSERT_EQ(opencl.size(), opencl_physical_devices().size()) << opencl_unavailable_reason();
  for (std::size_t index = 0; index < opencl.size(); ++index) {
    EXPECT_EQ(opencl[index]->name(), "opencl:" + std::to_string(index));
    EXPECT_FALSE(opencl[index]->host_accessible());
  }
  DeviceManager hidden(options_of({{"TP_OPENCL_DEVICES", "0"}}), env_of({}));
  EXPECT_TRUE(hidden.devices(DeviceKind::opencl).empty());
  DeviceManager invisible(options_of({{"TP_VISIBLE_DEVICES", ""}}), env_of({}));
  EXPECT_TRUE(invisible.devices(DeviceKind::opencl).empty());
}

TEST(OpenClDiscovery, ABadDeviceCountNamesTheVariable) {
  DeviceManagerOptions options;
  try {
    apply_device_env(options, env_of({{"TP_OPENCL_DEVICES", "65"}}));
    FAIL() << "65 accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("TP_OPENCL_DEVICES='65'"), std::string::npos) << error.what();
  }
  EXPECT_FALSE(options.opencl_devices.has_value());
}

TEST_F(OpenClDeviceTest, TwoLogicalDevicesShareOnePhysicalDeviceAndItsMemory) {
  DeviceManager manager(options_of({{"TP_OPENCL_DEVICES", "2"}}), env_of({}));
  const std::vector<DeviceInfo> info = manager.info();
  std::vector<DeviceInfo> opencl;
  for (const DeviceInfo& device : info) {
    if (device.kind == "opencl") opencl.push_back(device);
  }
  ASSERT_EQ(opencl.size(), 2u);
  const std::size_t physicals = opencl_physical_devices().size();
  for (std::size_t index = 0; index < 2; ++index) {
    EXPECT_EQ(opencl[index].name, "opencl:" + std::to_string(index));
    EXPECT_EQ(opencl[index].physical, "opencl:" + std::to_string(index % physicals));
    ASSERT_TRUE(opencl[index].opencl.has_value());
    const OpenClProperties& properties = *opencl[index].opencl;
    EXPECT_FALSE(properties.name.empty());
    EXPECT_FALSE(properties.driver_version.empty());
    EXPECT_GT(properties.compute_units, 0u);
    EXPECT_GT(properties.global_memory_bytes, 0u);
    if (physicals == 1) {
      EXPECT_EQ(opencl[index].capacity_bytes, properties.global_memory_bytes / 2);
    }
  }
  // Visible devices name the logical devices, renumbered as sim devices are.
  DeviceManager second_only(options_of({{"TP_OPENCL_DEVICES", "2"}, {"TP_VISIBLE_DEVICES", "opencl:1"}}), env_of({}));
  const std::vector<Device*> visible = second_only.devices(DeviceKind::opencl);
  ASSERT_EQ(visible.size(), 1u);
  EXPECT_EQ(visible[0]->name(), "opencl:0");
  EXPECT_EQ(visible[0]->physical_id().str(), "opencl:" + std::to_string(1 % physicals));
}

TEST_F(OpenClDeviceTest, AMissingOpenClDeviceIsNamedWithTheSettingThatMakesIt) {
  DeviceManager manager(options_of({{"TP_OPENCL_DEVICES", "1"}}), env_of({}));
  try {
    manager.device("opencl:3");
    FAIL() << "opencl:3 exists";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("TP_OPENCL_DEVICES"), std::string::npos) << error.what();
  }
}

TEST_F(OpenClDeviceTest, AllocationsShowInTheStatsAndGoBackOnRelease) {
  for (const auto allocator : {memory::AllocatorKind::bfc, memory::AllocatorKind::system}) {
    SCOPED_TRACE(std::string(memory::to_string(allocator)));
    auto device = make(allocator);
    {
      const auto buffer =
          device->allocate(3 * kMiB + 5, {.name = "weights", .kind = memory::AllocationKind::parameter});
      const memory::MemoryStats stats = device->memory().stats();
      EXPECT_EQ(stats.bytes_requested, 3 * kMiB + 5);
      EXPECT_GE(stats.bytes_in_use, 3 * kMiB + 5);
      EXPECT_GE(stats.bytes_reserved, stats.bytes_in_use);
      EXPECT_EQ(stats.bytes_limit, 64 * kMiB);
      ASSERT_NE(device->memory().tracking(), nullptr);
      const auto live = device->memory().tracking()->live_allocations();
      ASSERT_EQ(live.size(), 1u);
      EXPECT_EQ(live[0].tag.name, "weights");
      EXPECT_EQ(device->live_buffers(), 1u);
    }
    const memory::MemoryStats after = device->memory().stats();
    EXPECT_EQ(after.bytes_in_use, 0u);
    EXPECT_EQ(after.bytes_requested, 0u);
    EXPECT_EQ(after.peak_bytes_requested, 3 * kMiB + 5);
    device->memory().trim();
    EXPECT_EQ(device->memory().stats().bytes_reserved, 0u);
    EXPECT_EQ(device->live_buffers(), 0u);
  }
}

TEST_F(OpenClDeviceTest, ARequestOverTheBudgetThrowsTheOutOfMemoryReport) {
  auto device = make(memory::AllocatorKind::bfc, 16 * kMiB);
  auto held = device->allocate(10 * kMiB, {.name = "held"});
  try {
    (void)device->allocate(10 * kMiB, {.name = "too_big"});
    FAIL() << "no OutOfMemoryError";
  } catch (const OutOfMemoryError& error) {
    EXPECT_EQ(error.report().device, "opencl:0");
    EXPECT_EQ(error.report().requested_bytes, 10 * kMiB);
    EXPECT_EQ(error.report().limit_bytes, 16 * kMiB);
    const std::string text = error.what();
    EXPECT_NE(text.find("too_big"), std::string::npos) << text;
  }
  EXPECT_EQ(device->memory().stats().num_ooms, 1u);
  // The device stays usable: once the held buffer goes, the request fits.
  held.reset();
  EXPECT_NE(device->allocate(10 * kMiB), nullptr);
}

TEST_F(OpenClDeviceTest, ARegionLargerThanOneOpenClBufferIsRefusedAsOutOfMemory) {
  const std::size_t largest = opencl_physical_devices()[0].max_allocation_bytes;
  if (largest == 0 || largest >= 64 * kGiB) GTEST_SKIP() << "the device's largest buffer is too large to exceed";
  memory::MemoryConfig config = config_of(memory::AllocatorKind::system, largest * 2);
  auto device = make_opencl_device({DeviceKind::opencl, 0}, {DeviceKind::opencl, 0}, largest * 2, config, {});
  try {
    (void)device->allocate(largest + kMiB, {.name = "huge"});
    FAIL() << "a buffer beyond CL_DEVICE_MAX_MEM_ALLOC_SIZE was served";
  } catch (const OutOfMemoryError& error) {
    EXPECT_NE(std::string(error.what()).find("CL_DEVICE_MAX_MEM_ALLOC_SIZE"), std::string::npos) << error.what();
  }
}

TEST_F(OpenClDeviceTest, TheExpandableAllocatorIsRefusedNamingTheFix) {
  try {
    make(memory::AllocatorKind::expandable);
    FAIL() << "expandable accepted";
  } catch (const InvalidArgument& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("MemoryConfig::allocator = expandable"), std::string::npos) << text;
    EXPECT_NE(text.find("bfc"), std::string::npos) << text;
  }
  // TP_ALLOCATOR is process-wide: the sim devices take it, the opencl devices keep their allocator.
  DeviceManagerOptions options = options_of({{"TP_SIM_DEVICES", "1"}, {"TP_SIM_MEMORY", "64MiB"}});
  DeviceManager manager(options, env_of({{"TP_ALLOCATOR", "expandable"}}));
  EXPECT_EQ(manager.device("sim:0").memory().config().allocator, memory::AllocatorKind::expandable);
  EXPECT_EQ(manager.device("opencl:0").memory().config().allocator, memory::AllocatorKind::bfc);
  // A MemoryConfig that asks for expandable on an opencl device is refused when the devices are built.
  DeviceManager refused(options_of({}), env_of({}));
  memory::MemoryConfig expandable = DeviceManagerOptions::default_device_memory_config();
  expandable.allocator = memory::AllocatorKind::expandable;
  refused.set_memory_config({DeviceKind::opencl, 0}, expandable);
  EXPECT_THROW(refused.devices(), InvalidArgument);
}

TEST_F(OpenClDeviceTest, HostCodeCannotTouchDeviceMemory) {
  auto device = make();
  const auto buffer = device->allocate(kKiB);
  EXPECT_THROW((void)buffer->data(), DeviceError);
}

TEST_F(OpenClDeviceTest, BytesRoundTripThroughTheDevice) {
  auto device = make(memory::AllocatorKind::bfc, 64 * kMiB, DeviceOptions{.num_streams = 2});
  std::vector<std::uint8_t> bytes(3 * kMiB + 17);
  std::iota(bytes.begin(), bytes.end(), std::uint8_t{3});
  const auto first = device->allocate(bytes.size());
  const auto second = device->allocate(bytes.size() + 100);
  device->copy_from_host(device->stream(0), bytes.data(), first, 0, bytes.size());
  // Within the device, across streams, at an offset.
  copy(device->stream(0), first, 0, device->stream(1), second, 100, bytes.size());
  std::vector<std::uint8_t> back(bytes.size());
  device->copy_to_host(device->stream(1), second, 100, back.data(), back.size());
  EXPECT_EQ(back, bytes);
  // Overlapping ranges of one buffer move like memmove.
  copy(device->stream(1), second, 100, device->stream(1), second, 0, bytes.size());
  device->copy_to_host(device->stream(1), second, 0, back.data(), back.size());
  EXPECT_EQ(back, bytes);
  // Asynchronous read-back.
  const HostReadback readback = device->read_to_host_async(device->stream(0), first, 5, 1000);
  readback.ready.synchronize();
  EXPECT_EQ(std::memcmp(readback.bytes.get(), bytes.data() + 5, 1000), 0);
}

TEST_F(OpenClDeviceTest, TensorsMoveBetweenOpenClDevicesAndTheHost) {
  auto first = make(memory::AllocatorKind::bfc, 64 * kMiB, {}, 0);
  auto second = make(memory::AllocatorKind::bfc, 64 * kMiB, {}, 1);
  auto sim = make_sim_device({DeviceKind::sim, 0}, {DeviceKind::sim, 0}, 64 * kMiB,
                             config_of(memory::AllocatorKind::bfc, 64 * kMiB), {});
  std::vector<float> values(10000);
  std::iota(values.begin(), values.end(), 0.5f);
  const Tensor on_first = Tensor::from_vector<float>(values, Shape{100, 100}, *first);
  const Tensor on_second = on_first.to(*second);
  const Tensor on_sim = on_second.to(*sim);
  const Tensor back_on_first = on_sim.to(*first);
  EXPECT_EQ(on_second.to_vector<float>(), values);
  EXPECT_EQ(on_sim.to_vector<float>(), values);
  EXPECT_EQ(back_on_first.to_vector<float>(), values);
  EXPECT_EQ(back_on_first.slice(10, 20).to_vector<float>(),
            std::vector<float>(values.begin() + 1000, values.begin() + 2000));
}

TEST_F(OpenClDeviceTest, PoisonFillsFreedDeviceMemory) {
  auto device = make(memory::AllocatorKind::bfc, 64 * kMiB, DeviceOptions{.poison_freed = true});
  const std::vector<std::uint8_t> ones(4096, 1);
  {
    const auto buffer = device->allocate(ones.size());
    device->copy_from_host(device->stream(), ones.data(), buffer, 0, ones.size());
    device->synchronize();
  }
  const auto reused = device->allocate(ones.size());  // BFC hands back the same chunk
  std::vector<std::uint8_t> back(ones.size());
  device->copy_to_host(device->stream(), reused, 0, back.data(), back.size());
  EXPECT_EQ(back, std::vector<std::uint8_t>(ones.size(), kPoisonByte));
}

}  // namespace
}  // namespace tp::device

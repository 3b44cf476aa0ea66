// SPDX-License-Identifier: Apache-2.0
// CUDA discovery: the GPUs the runtime reports, the reason when there are none, one cuda:N per GPU in the
// DeviceManager with the GPU's memory as its capacity, and the properties `tensorpool devices` prints. The
// checks of a machine without a GPU run here; the others skip, saying why.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/device/device_manager.hpp"

namespace tp::backend::cuda {
namespace {

using testing::cuda_options;
using testing::make_manager;

std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

TEST(CudaDiscovery, TheReasonIsGivenExactlyWhenThereIsNoDevice) {
  const std::vector<device::CudaProperties>& found = device::cuda_physical_devices();
  EXPECT_EQ(&found, &device::cuda_physical_devices()) << "asked once per process";
  if (found.empty()) {
    const std::string reason = device::cuda_unavailable_reason();
    EXPECT_NE(reason.find("no CUDA"), std::string::npos) << reason;
  } else {
    EXPECT_EQ(device::cuda_unavailable_reason(), "");
  }
}

TEST(CudaDiscovery, ACudaDeviceThatDoesNotExistNamesTheReason) {
  if (!device::cuda_physical_devices().empty()) GTEST_SKIP() << "this machine has a GPU: cuda:0 exists";
  const auto manager = make_manager(cuda_options());
  const std::string missing = message_of([&] { (void)manager->device("cuda:0"); });
  EXPECT_NE(missing.find(device::cuda_unavailable_reason()), std::string::npos) << missing;
  // A visible list that names one fails the same way, naming the reason.
  auto options = cuda_options();
  options.visible_devices = std::vector<device::DeviceId>{{device::DeviceKind::cuda, 0}};
  const auto hidden = make_manager(options);
  const std::string visible = message_of([&] { (void)hidden->devices(); });
  EXPECT_NE(visible.find("visible device cuda:0 does not exist"), std::string::npos) << visible;
  EXPECT_NE(visible.find(device::cuda_unavailable_reason()), std::string::npos) << visible;
  EXPECT_THROW((void)device::cuda_free_bytes(0), DeviceError);
}

TEST(CudaDiscovery, CudaDevicesOffPlanNone) {
  auto options = cuda_options();
  options.cuda_devices = false;
  const auto manager = make_manager(options);
  EXPECT_TRUE(manager->devices(device::DeviceKind::cuda).empty());
  // With GPUs too: a visible list naming one says the cuda devices are off.
  options.visible_devices = std::vector<device::DeviceId>{{device::DeviceKind::cuda, 0}};
  const auto hidden = make_manager(options);
  const std::string visible = message_of([&] { (void)hidden->devices(); });
  EXPECT_NE(visible.find("the cuda devices are off"), std::string::npos) << visible;
  device::DeviceManager configured(cuda_options(), [](const char*) -> const char* { return nullptr; });
  configured.set_cuda_devices(false);
  EXPECT_TRUE(configured.devices(device::DeviceKind::cuda).empty());
  EXPECT_THROW(configured.set_cuda_devices(true), InvalidArgument) << "configured before the devices exist only";
}

TEST(CudaDiscovery, TpCudaDevicesTurnsThemOffOrOn) {
  const auto env_of = [](const char* value) {
    return [value](const char* name) -> const char* {
      return std::string_view(name) == "TP_CUDA_DEVICES" ? value : nullptr;
    };
  };
  device::DeviceManagerOptions options;
  device::apply_device_env(options, env_of("0"));
  EXPECT_FALSE(options.cuda_devices);
  device::apply_device_env(options, env_of(" 1 "));
  EXPECT_TRUE(options.cuda_devices);
  const std::string bad = message_of([&] { device::apply_device_env(options, env_of("2")); });
  EXPECT_NE(bad.find("TP_CUDA_DEVICES='2' is not valid"), std::string::npos) << bad;
  EXPECT_TRUE(options.cuda_devices) << "a bad value changes nothing";
}

TEST(CudaDiscovery, PropertiesDescribeEachGpu) {
  TP_REQUIRE_CUDA();
  const std::vector<device::CudaProperties>& found = device::cuda_physical_devices();
  for (std::size_t index = 0; index < found.size(); ++index) {
    const device::CudaProperties& gpu = found[index];
    EXPECT_EQ(gpu.ordinal, static_cast<int>(index));
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GE(gpu.compute_major, 3) << gpu.name;
    EXPECT_GT(gpu.total_bytes, std::size_t{0}) << gpu.name;
    EXPECT_GT(gpu.multiprocessors, 0) << gpu.name;
    EXPECT_EQ(gpu.free_bytes, std::size_t{0}) << "discovery creates no context, so it reads no free memory";
    const std::size_t free = device::cuda_free_bytes(gpu.ordinal);
    EXPECT_GT(free, std::size_t{0}) << gpu.name;
    EXPECT_LE(free, gpu.total_bytes) << gpu.name;
  }
  EXPECT_THROW((void)device::cuda_free_bytes(static_cast<int>(found.size())), DeviceError);
}

TEST(CudaDiscovery, TheDeviceManagerHasOneCudaDevicePerGpu) {
  TP_REQUIRE_CUDA();
  const std::vector<device::CudaProperties>& found = device::cuda_physical_devices();
  const auto manager = make_manager(cuda_options());
  const std::vector<device::Device*> cuda = manager->devices(device::DeviceKind::cuda);
  ASSERT_EQ(cuda.size(), found.size());
  for (std::size_t index = 0; index < cuda.size(); ++index) {
    EXPECT_EQ(cuda[index]->name(), "cuda:" + std::to_string(index));
    EXPECT_EQ(cuda[index]->capacity_bytes(), found[index].total_bytes);
    EXPECT_FALSE(cuda[index]->host_accessible());
    EXPECT_EQ(cuda[index]->staging_kind(), "cudaHostAlloc");
  }
  for (const device::DeviceInfo& info : manager->info()) {
    if (info.kind != "cuda") {
      EXPECT_FALSE(info.cuda.has_value()) << info.name;
      continue;
    }
    ASSERT_TRUE(info.cuda.has_value()) << info.name;
    EXPECT_FALSE(info.cuda->name.empty());
    EXPECT_GT(info.cuda->free_bytes, std::size_t{0}) << info.name << ": info() reads the free memory";
    EXPECT_LE(info.cuda->free_bytes, info.cuda->total_bytes) << info.name;
  }
}

TEST(CudaDiscovery, AVisibleListKeepsOnlyTheCudaDevicesItNames) {
  TP_REQUIRE_CUDA();
  const int last = static_cast<int>(device::cuda_physical_devices().size()) - 1;
  auto options = cuda_options();
  options.visible_devices = std::vector<device::DeviceId>{{device::DeviceKind::cuda, last}};
  const auto manager = make_manager(options);
  const std::vector<device::Device*> cuda = manager->devices(device::DeviceKind::cuda);
  ASSERT_EQ(cuda.size(), 1U);
  EXPECT_EQ(cuda[0]->name(), "cuda:0");
  EXPECT_EQ(cuda[0]->physical_id().str(), "cuda:" + std::to_string(last));
}

TEST(CudaDiscovery, ALogicalSplitGivesDevicesWithTheirLimits) {
  TP_REQUIRE_CUDA();
  constexpr std::size_t kLimit = std::size_t{256} << 20;
  const auto manager = make_manager(cuda_options({kLimit, kLimit}));
  device::Device& first = manager->device("cuda:0");
  device::Device& second = manager->device("cuda:1");
  EXPECT_EQ(first.capacity_bytes(), kLimit);
  EXPECT_EQ(second.capacity_bytes(), kLimit);
  EXPECT_EQ(first.physical_id().str(), "cuda:0");
  EXPECT_EQ(second.physical_id().str(), "cuda:0");
  EXPECT_TRUE(device::peer_accessible(first, second)) << "logical devices of one GPU share its memory";
  EXPECT_TRUE(device::peer_accessible(second, first));
}

}  // namespace
}  // namespace tp::backend::cuda

// SPDX-License-Identifier: Apache-2.0
// Shared (host-visible) memory through the Device API, on every backend present: allocate_shared gives a buffer
// host code may touch on cpu (host memory) and on opencl devices with fine-grained SVM (a stack of its own), and
// falls back to device memory, not host-visible and said so, on sim; MemoryConfig::shared_kinds changes nothing
// where there is no shared memory; a Dataset cannot be staged on a device without it. (The opencl device's
// shared memory itself: tests/backend/opencl/internal/opencl_shared_memory_test.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/tensor.hpp"
#include "tensorpool/data/dataset.hpp"
#include "tensorpool/data/idx.hpp"

namespace tp::device {
namespace {

using testing::Backend;

class SharedMemory : public ::testing::TestWithParam<Backend> {};

TEST_P(SharedMemory, AllocateSharedIsHostVisibleWhereTheDeviceHasSharedOrHostMemory) {
  auto device = testing::make_device(GetParam());
  const auto buffer = device->allocate_shared(4096, {.name = "batch/x", .kind = memory::AllocationKind::staging});
  const std::string note = device->shared_memory_note();
  if (GetParam() == Backend::sim) {
    EXPECT_EQ(device->shared_memory(), nullptr);
    EXPECT_FALSE(buffer->host_visible());
    EXPECT_THROW((void)buffer->data(), DeviceError);
    EXPECT_NE(note.find("sim:0 has no shared memory"), std::string::npos) << note;
    EXPECT_EQ(device->memory().stats().bytes_in_use, buffer->allocated_bytes());  // its device memory
    return;
  }
  ASSERT_TRUE(buffer->host_visible()) << note;
  std::vector<std::uint8_t> pattern(4096, 0x5A);
  std::memcpy(buffer->data(), pattern.data(), pattern.size());  // host code, outside any stream
  std::vector<std::uint8_t> back(4096);
  device->copy_to_host(device->stream(0), buffer, 0, back.data(), back.size());
  EXPECT_EQ(back, pattern);
  if (GetParam() == Backend::cpu) {
    EXPECT_EQ(device->shared_memory(), nullptr);
    EXPECT_NE(note.find("host memory"), std::string::npos) << note;
  } else if (device->shared_memory() != nullptr) {
    EXPECT_EQ(device->shared_memory()->stats().bytes_in_use, buffer->allocated_bytes());
  }
}

TEST_P(SharedMemory, SharedKindsChangeNothingWithoutSharedMemory) {
  if (GetParam() == Backend::opencl) GTEST_SKIP() << "opencl's shared kinds: opencl_shared_memory_test";
  memory::MemoryConfig config = testing::grow_config(GetParam() == Backend::cpu ? "cpu" : "sim", 64 * kMiB);
  config.shared_kinds = {memory::AllocationKind::staging};
  const auto device = GetParam() == Backend::cpu
                          ? make_cpu_device({DeviceKind::cpu, 0}, {DeviceKind::cpu, 0}, 64 * kMiB, config, {})
                          : make_sim_device({DeviceKind::sim, 0}, {DeviceKind::sim, 0}, 64 * kMiB, config, {});
  const Tensor staged =
      Tensor::empty(Shape{8}, DType::f32, *device, {.name = "in", .kind = memory::AllocationKind::staging});
  EXPECT_EQ(staged.buffer()->host_visible(), device->host_accessible());
  EXPECT_EQ(device->memory().stats().bytes_in_use, staged.buffer()->allocated_bytes());  // from its memory
}

TEST_P(SharedMemory, DatasetsAreStagedOnlyWhereHostCodeCanWriteBatches) {
  auto device = testing::make_device(GetParam());
  const std::vector<std::uint8_t> pixels(8 * 4, 7);
  const std::vector<std::uint8_t> labels(8, 1);
  const data::Dataset dataset = data::Dataset::from_arrays(data::IdxArray::of<std::uint8_t>({8, 4}, pixels),
                                                           data::IdxArray::of<std::uint8_t>({8}, labels))
                                    .batch(4);
  if (device->host_accessible() || device->shared_memory() != nullptr) {
    const data::Batch batch = *dataset.stage_on(*device).epoch(0).next();
    EXPECT_TRUE(batch.features.buffer()->host_visible());
    EXPECT_EQ(batch.features.to_vector<float>(), std::vector<float>(16, 7.0f));
    return;
  }
  try {
    (void)dataset.stage_on(*device);
    FAIL() << "a dataset was staged on " << device->name() << ", which has no shared memory";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("has no shared memory"), std::string::npos) << error.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SharedMemory, ::testing::ValuesIn(testing::present_backends()),
                         testing::backend_param_name);

}  // namespace
}  // namespace tp::device

// SPDX-License-Identifier: Apache-2.0
// Tensors: creation and copies on both backends, views, exact per-tensor byte accounting, tags reaching the
// tracking adaptor, and host code kept away from device memory.
#include "tensorpool/core/tensor.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/statistics_adaptor.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"

namespace tp {
namespace {

using device::testing::Backend;
using device::testing::make_device;

std::vector<float> iota(std::size_t count) {
  std::vector<float> values(count);
  std::iota(values.begin(), values.end(), 0.0F);
  return values;
}

class TensorOnBackend : public ::testing::TestWithParam<Backend> {};

TEST_P(TensorOnBackend, RoundTripsThroughTheDevice) {
  auto device = make_device(GetParam());
  const std::vector<float> values = iota(7 * 13);
  Tensor tensor = Tensor::from_vector<float>(values, Shape{7, 13}, *device, {.name = "x"});
  EXPECT_EQ(tensor.shape(), (Shape{7, 13}));
  EXPECT_EQ(tensor.dtype(), DType::f32);
  EXPECT_EQ(tensor.nbytes(), 7u * 13u * 4u);
  EXPECT_EQ(tensor.to_vector<float>(), values);
}

TEST_P(TensorOnBackend, ViewsShareTheBufferAndSeeTheRightElements) {
  auto device = make_device(GetParam());
  const std::vector<float> values = iota(6 * 4);
  Tensor tensor = Tensor::from_vector<float>(values, Shape{6, 4}, *device, {.name = "x"});
  Tensor rows = tensor.slice(2, 5);
  EXPECT_EQ(rows.shape(), (Shape{3, 4}));
  EXPECT_EQ(rows.buffer(), tensor.buffer());
  EXPECT_EQ(rows.to_vector<float>(), std::vector<float>(values.begin() + 8, values.begin() + 20));
  Tensor flat = rows.reshape(Shape{12});
  EXPECT_EQ(flat.to_vector<float>(), rows.to_vector<float>());
  EXPECT_EQ(tensor.slice(6, 6).num_elements(), 0);
}

TEST_P(TensorOnBackend, BadViewsNameTheShapes) {
  auto device = make_device(GetParam());
  Tensor tensor = Tensor::empty(Shape{6, 4}, DType::f32, *device, {.name = "x"});
  try {
    (void)tensor.reshape(Shape{5, 5});
    FAIL() << "reshape to a different element count succeeded";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("[6,4]"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("[5,5]"), std::string::npos) << error.what();
  }
  EXPECT_THROW(tensor.slice(3, 7), InvalidArgument);
  EXPECT_THROW(tensor.slice(-1, 2), InvalidArgument);
  EXPECT_THROW(tensor.data<double>(), InvalidArgument);
  EXPECT_THROW((Tensor::from_vector<float>(iota(5), Shape{2, 3}, *device)), InvalidArgument);
  EXPECT_THROW(Tensor().device(), InvalidArgument);
}

TEST_P(TensorOnBackend, LiveTensorBytesEqualTheAllocatorsRequestedBytes) {
  auto device = make_device(GetParam());
  std::vector<Tensor> tensors;
  std::size_t expected = 0;
  const std::vector<Shape> shapes = {Shape{784, 512}, Shape{512}, Shape{512, 10}, Shape{10},     Shape{33, 7},
                                     Shape{1},        Shape{},    Shape{0, 5},    Shape{3, 3, 3}};
  const std::vector<DType> dtypes = {DType::f32, DType::f16, DType::f64, DType::i32, DType::u8, DType::boolean};
  for (std::size_t index = 0; index < shapes.size(); ++index) {
    const DType dtype = dtypes[index % dtypes.size()];
    tensors.push_back(Tensor::empty(shapes[index], dtype, *device, {.name = "t" + std::to_string(index)}));
    expected += tensors.back().nbytes();
    EXPECT_EQ(tensors.back().nbytes(), static_cast<std::size_t>(shapes[index].num_elements()) * size_of(dtype));
    EXPECT_GE(tensors.back().allocated_bytes(), tensors.back().nbytes());
  }
  tensors.push_back(tensors[0].slice(0, 10));  // views add no bytes
  EXPECT_EQ(device->memory().stats().bytes_requested, expected);
  std::size_t allocated = 0;
  for (std::size_t index = 0; index < shapes.size(); ++index) allocated += tensors[index].allocated_bytes();
  EXPECT_EQ(device->memory().stats().bytes_in_use, allocated);  // rounding accounted per tensor, exactly
  expected -= tensors[2].nbytes();
  tensors.erase(tensors.begin() + 2);
  device->synchronize();
  EXPECT_EQ(device->memory().stats().bytes_requested, expected);
  tensors.clear();
  device->synchronize();
  EXPECT_EQ(device->memory().stats().bytes_requested, 0u);
  EXPECT_EQ(device->live_buffers(), 0u);
}

TEST_P(TensorOnBackend, TagsReachTheTrackingAdaptor) {
  auto device = make_device(GetParam());
  Tensor kernel = Tensor::empty(Shape{784, 512}, DType::f32, *device,
                                {.name = "dense/kernel", .kind = memory::AllocationKind::parameter, .op = "Dense"});
  ASSERT_NE(device->memory().tracking(), nullptr);
  const auto live = device->memory().tracking()->live_allocations();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].tag.name, "dense/kernel");
  EXPECT_EQ(live[0].tag.op, "Dense");
  EXPECT_EQ(live[0].tag.kind, memory::AllocationKind::parameter);
  EXPECT_EQ(live[0].tag.dtype, "float32");
  EXPECT_EQ(live[0].tag.shape, (std::vector<std::int64_t>{784, 512}));
  EXPECT_EQ(live[0].bytes, kernel.nbytes());
}

TEST_P(TensorOnBackend, CopiesToAnotherDeviceOfEitherKind) {
  auto source = make_device(GetParam(), 64 * kMiB, {}, 0);
  auto target = make_device(Backend::sim, 64 * kMiB, {}, 1);
  const std::vector<float> values = iota(1000);
  Tensor tensor = Tensor::from_vector<float>(values, Shape{10, 100}, *source, {.name = "x"});
  Tensor moved = tensor.slice(3, 6).to(*target);
  EXPECT_EQ(&moved.device(), target.get());
  EXPECT_EQ(moved.name(), "x");
  EXPECT_EQ(moved.to_vector<float>(), std::vector<float>(values.begin() + 300, values.begin() + 600));
  Tensor back = moved.to(*source, {.name = "back"});
  EXPECT_EQ(back.to_vector<float>(), moved.to_vector<float>());
  Tensor same = tensor.to(*source);  // within one device
  EXPECT_EQ(same.to_vector<float>(), values);
}

INSTANTIATE_TEST_SUITE_P(Backends, TensorOnBackend, ::testing::ValuesIn(device::testing::present_backends()),
                         device::testing::backend_param_name);

TEST(Tensor, HostCodeCannotTouchSimDeviceMemory) {
  auto device = make_device(Backend::sim);
  Tensor tensor = Tensor::from_vector<float>(iota(4), Shape{4}, *device, {.name = "weights"});
  try {
    (void)tensor.data<float>();
    FAIL() << "host code read sim device memory";
  } catch (const DeviceError& error) {
    EXPECT_NE(std::string(error.what()).find("sim:0"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("weights"), std::string::npos) << error.what();
  }
  const float first = device::testing::run_on(device->stream(), [tensor] { return tensor.data<float>()[1]; });
  EXPECT_EQ(first, 1.0F);
  auto cpu = make_device(Backend::cpu);
  Tensor host = Tensor::from_vector<float>(iota(4), Shape{4}, *cpu);
  EXPECT_EQ(host.data<float>()[3], 3.0F);  // cpu memory is host memory
}

TEST(Tensor, AKernelOnAnotherDevicesStreamCannotTouchIt) {
  auto first = make_device(Backend::sim, 64 * kMiB, {}, 0);
  auto second = make_device(Backend::sim, 64 * kMiB, {}, 1);
  Tensor tensor = Tensor::empty(Shape{4}, DType::f32, *first);
  second->stream().enqueue([tensor] { (void)tensor.data(); });
  EXPECT_THROW(second->stream().synchronize(), DeviceError);
}

TEST(Tensor, CopyRangesAreChecked) {
  auto device = make_device(Backend::sim);
  auto buffer = device->allocate(64);
  std::vector<char> host(128);
  EXPECT_THROW(device->copy_from_host(device->stream(), host.data(), buffer, 32, 64), InvalidArgument);
  EXPECT_THROW(device->copy_to_host(device->stream(), buffer, 65, host.data(), 0), InvalidArgument);
  auto other = make_device(Backend::sim, 64 * kMiB, {}, 1);
  EXPECT_THROW(other->copy_from_host(other->stream(), host.data(), buffer, 0, 8), InvalidArgument);
  EXPECT_THROW(device->copy_from_host(other->stream(), host.data(), buffer, 0, 8), InvalidArgument);
}

}  // namespace
}  // namespace tp

namespace tp {
namespace {

TEST(Tensor, FromBufferViewsARangeOfOneAllocation) {
  auto device = make_device(Backend::cpu);
  auto arena = device->allocate(1024, {.name = "arena"});
  Tensor first = Tensor::from_buffer(arena, 0, Shape{4, 4}, DType::f32);
  Tensor second = Tensor::from_buffer(arena, 512, Shape{64}, DType::f64);
  EXPECT_EQ(static_cast<char*>(second.data()) - static_cast<char*>(first.data()), 512);
  EXPECT_THROW(Tensor::from_buffer(arena, 520, Shape{64}, DType::f64), InvalidArgument);
  EXPECT_THROW(Tensor::from_buffer(nullptr, 0, Shape{1}, DType::f32), InvalidArgument);
}

TEST(Tensor, ABufferAllocatedThroughAnAdaptorReturnsToIt) {
  auto device = make_device(Backend::sim);
  auto through = std::make_shared<memory::StatisticsAdaptor>(device->memory(), "session");
  {
    auto buffer = device->allocate(4096, {.name = "charged"}, through);
    EXPECT_EQ(through->stats().bytes_requested, 4096u);
    EXPECT_EQ(device->memory().stats().bytes_requested, 4096u);
  }
  EXPECT_EQ(through->stats().bytes_requested, 0u);
  EXPECT_EQ(device->memory().stats().bytes_requested, 0u);
}

}  // namespace
}  // namespace tp

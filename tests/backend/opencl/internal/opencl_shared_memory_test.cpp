// SPDX-License-Identifier: Apache-2.0
// Shared (unified) memory on opencl devices: Device::shared_memory() is a stack of its own over fine-grained
// buffer SVM, its buffers are host-visible (Buffer::data() works from host code) and reach kernels through
// their cl_mem, reads to the host take no staged copy, the bytes are reported apart from the device memory
// (stats, profiler), MemoryConfig::shared_kinds routes tensor kinds to it, and a Dataset staged on the device
// assembles its batches there; a session's fetched results are allocated there and profiled per tensor, and a
// batch fed from there is read in place.
// Skips, saying why, without an OpenCL device with fine-grained buffer SVM.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "backend/opencl/opencl_context.hpp"
#include "backend/opencl/opencl_device.hpp"
#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/compile/static_planner.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/tensor.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/data/dataset.hpp"
#include "tensorpool/data/idx.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/device/device_manager.hpp"
#include "tensorpool/ops/elementwise.hpp"
#include "tensorpool/profile/exporters.hpp"
#include "tensorpool/profile/memory_profiler.hpp"
#include "tensorpool/runtime/session.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::backend::opencl {
namespace {

memory::MemoryConfig config_of(std::vector<memory::AllocationKind> shared_kinds = {}) {
  memory::MemoryConfig config;
  config.device = "opencl:0";
  config.policy = memory::GrowthPolicy::grow;
  config.limit_bytes = 64 * kMiB;
  config.shared_kinds = std::move(shared_kinds);
  return config;
}

class OpenClSharedMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device::opencl_physical_devices().empty()) {
      GTEST_SKIP() << "no OpenCL device: " << device::opencl_unavailable_reason();
    }
    if (!OpenClContext::acquire(0)->properties().svm_fine_grain_buffer) {
      GTEST_SKIP() << "opencl:0 has no fine-grained buffer SVM, so it has no shared memory";
    }
  }
  static std::unique_ptr<device::Device> make(std::vector<memory::AllocationKind> shared_kinds = {}) {
    return device::make_opencl_device({device::DeviceKind::opencl, 0}, {device::DeviceKind::opencl, 0}, 256 * kMiB,
                                      config_of(std::move(shared_kinds)), {});
  }
  static std::uint64_t staged_copies(device::Device& device) {
    return dynamic_cast<OpenClDevice&>(device).staging().stats().num_allocs;
  }
};

// The host writes a shared tensor, a kernel reads it and writes another shared tensor, the host reads that one:
// no copy goes through the device's staging memory at any point.
TEST_F(OpenClSharedMemory, HostAndKernelsTouchSharedTensorsWithoutCopies) {
  auto device = make();
  ASSERT_NE(device->shared_memory(), nullptr);
  constexpr std::int64_t kCount = 1000;
  const auto bytes = static_cast<std::size_t>(kCount) * sizeof(float);
  const Tensor x = Tensor::from_buffer(device->allocate_shared(bytes, {.name = "x"}), 0, Shape{kCount}, DType::f32);
  const Tensor y = Tensor::from_buffer(device->allocate_shared(bytes, {.name = "y"}), 0, Shape{kCount}, DType::f32);
  ASSERT_TRUE(x.buffer()->host_visible());
  const std::uint64_t staged_before = staged_copies(*device);

  float* host_x = x.data<float>();  // host code, outside any stream: allowed for shared memory
  for (std::int64_t i = 0; i < kCount; ++i) host_x[i] = static_cast<float>(i);
  ops::scale_into(x, 3.0, y);  // a kernel reads x and writes y through their cl_mem
  device->synchronize();
  const float* host_y = y.data<float>();
  for (std::int64_t i = 0; i < kCount; ++i) ASSERT_EQ(host_y[i], 3.0f * static_cast<float>(i)) << "element " << i;

  // Reads to the host come straight from the shared memory.
  ops::scale_into(y, 0.5, x);
  const device::HostReadback readback = device->read_to_host_async(device->stream(0), x.buffer(), 0, bytes);
  readback.ready.synchronize();
  EXPECT_EQ(readback.bytes.get(), x.data());
  EXPECT_EQ(static_cast<const float*>(readback.bytes.get())[10], 15.0f);
  EXPECT_EQ(y.to_vector<float>()[7], 21.0f);
  EXPECT_EQ(staged_copies(*device), staged_before) << "a shared tensor was copied through staging memory";

  // A device tensor still goes through staging: the counter above does count copies.
  const Tensor device_tensor = ops::scale(x, 1.0);
  EXPECT_EQ(device_tensor.to_vector<float>()[10], 15.0f);
  EXPECT_GT(staged_copies(*device), staged_before);
}

TEST_F(OpenClSharedMemory, DeviceTensorsStillRefuseHostAccess) {
  auto device = make();
  const Tensor on_device = Tensor::empty(Shape{16}, DType::f32, *device, {.name = "weights"});
  EXPECT_FALSE(on_device.buffer()->host_visible());
  try {
    (void)on_device.data();
    FAIL() << "host code touched opencl:0 device memory";
  } catch (const DeviceError& error) {
    EXPECT_NE(std::string(error.what()).find("copy it to the host first"), std::string::npos) << error.what();
  }
}

// Shared bytes live in their own stack ("opencl:0/shared"), counted apart from the device memory, in the
// stack's stats and in the profiler's info and summary.
TEST_F(OpenClSharedMemory, SharedBytesAreReportedApart) {
  auto device = make();
  const memory::MemoryStats device_before = device->memory().stats();
  {
    const auto shared = device->allocate_shared(1 * kMiB, {.name = "batch/x", .kind = memory::AllocationKind::staging});
    const auto on_device = device->allocate(2 * kMiB, {.name = "w", .kind = memory::AllocationKind::parameter});
    EXPECT_EQ(device->shared_memory()->config().device, "opencl:0/shared");
    EXPECT_EQ(device->shared_memory()->stats().bytes_in_use, 1 * kMiB);
    EXPECT_EQ(device->memory().stats().bytes_in_use, device_before.bytes_in_use + 2 * kMiB);
    const profile::MemoryInfo info = profile::memory_info(*device);
    EXPECT_EQ(info.shared_current, 1 * kMiB);
    EXPECT_EQ(info.current, device_before.bytes_in_use + 2 * kMiB);
    const std::string summary = profile::memory_summary(*device);
    EXPECT_NE(summary.find("opencl:0/shared (fine-grained buffer SVM)"), std::string::npos) << summary;
    EXPECT_NE(summary.find("opencl:0/shared: in use 1.00 MiB"), std::string::npos) << summary;
  }
  EXPECT_EQ(device->shared_memory()->stats().bytes_in_use, 0u);
  EXPECT_EQ(profile::memory_info(*device).shared_peak, 1 * kMiB);
}

// MemoryConfig::shared_kinds sends the tensors of the listed kinds to shared memory, and only those.
TEST_F(OpenClSharedMemory, MemoryConfigSelectsSharedKinds) {
  auto device = make({memory::AllocationKind::staging});
  const Tensor staged =
      Tensor::empty(Shape{8}, DType::f32, *device, {.name = "in", .kind = memory::AllocationKind::staging});
  const Tensor activation =
      Tensor::empty(Shape{8}, DType::f32, *device, {.name = "act", .kind = memory::AllocationKind::activation});
  EXPECT_TRUE(staged.buffer()->host_visible());
  EXPECT_FALSE(activation.buffer()->host_visible());
  EXPECT_EQ(device->shared_memory()->stats().bytes_in_use, staged.buffer()->allocated_bytes());
  std::vector<float> values(8);
  std::iota(values.begin(), values.end(), 1.0f);
  std::memcpy(staged.data(), values.data(), sizeof(float) * values.size());
  EXPECT_EQ(ops::scale(staged, 2.0).to_vector<float>()[7], 16.0f);
}

// A Dataset staged on opencl:0 assembles its batches in the device's shared memory: the same values as batches
// staged on the host, usable by kernels without a copy. Prints what feeding one batch to the device costs both
// ways (host-staged copy against a copy within the device).
TEST_F(OpenClSharedMemory, DatasetBatchesAreAssembledInSharedMemory) {
  auto device = make();
  memory::MemoryConfig host_config;
  host_config.device = "cpu:0";
  host_config.limit_bytes = 256 * kMiB;
  auto host =
      device::make_cpu_device({device::DeviceKind::cpu, 0}, {device::DeviceKind::cpu, 0}, 256 * kMiB, host_config, {});
  constexpr std::int64_t kExamples = 512, kPixels = 784, kBatch = 128;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(kExamples * kPixels));
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 7 % 251);
  std::vector<std::uint8_t> labels(static_cast<std::size_t>(kExamples));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>(i % 10);
  const data::Dataset dataset =
      data::Dataset::from_arrays(data::IdxArray::of<std::uint8_t>({kExamples, kPixels}, pixels),
                                 data::IdxArray::of<std::uint8_t>({kExamples}, labels))
          .shuffle(3)
          .batch(kBatch);
  data::BatchIterator on_host = dataset.stage_on(*host).epoch(0);
  data::BatchIterator on_device = dataset.stage_on(*device).epoch(0);
  double host_staged_s = 0, shared_s = 0;
  for (int index = 0; index < 4; ++index) {
    const data::Batch a = *on_host.next();
    const data::Batch b = *on_device.next();
    ASSERT_EQ(&b.features.device(), device.get());
    ASSERT_TRUE(b.features.buffer()->host_visible());
    ASSERT_EQ(std::memcmp(a.features.data(), b.features.data(), a.features.nbytes()), 0) << "batch " << index;
    ASSERT_EQ(std::memcmp(a.labels.data(), b.labels.data(), a.labels.nbytes()), 0) << "batch " << index;
    // Feeding the batch to device memory, as a session's feed step does: from the host through staging, or
    // within the device from its shared memory.
    const auto start = std::chrono::steady_clock::now();
    const Tensor fed_from_host = a.features.to(*device);
    device->synchronize();
    const auto middle = std::chrono::steady_clock::now();
    const Tensor fed_from_shared = b.features.to(*device);
    device->synchronize();
    const auto end = std::chrono::steady_clock::now();
    if (index > 0) {  // the first pair warms the queues
      host_staged_s += std::chrono::duration<double>(middle - start).count();
      shared_s += std::chrono::duration<double>(end - middle).count();
    }
    EXPECT_EQ(ops::scale(b.features, 1.0).to_vector<float>(), fed_from_host.to_vector<float>());
    EXPECT_EQ(fed_from_shared.to_vector<float>(), fed_from_host.to_vector<float>());
  }
  std::cout << "[ shared ] feeding a " << kBatch << "x" << kPixels << " float32 batch to opencl:0: host-staged "
            << host_staged_s / 3 * 1e6 << " us, from shared memory " << shared_s / 3 * 1e6 << " us (mean of 3)\n";
  EXPECT_GT(device->shared_memory()->stats().peak_bytes_in_use, 0u);
}

// End to end: a model on opencl:0 trained on batches assembled in opencl:0's shared memory takes the same
// steps, to the last bit, as the same model fed host-staged batches (the session's feed reads the shared batch
// on the device's queue instead of a host-staged copy).
TEST_F(OpenClSharedMemory, TrainingOnSharedBatchesMatchesHostStagedBatches) {
  device::DeviceManagerOptions options;
  options.opencl_devices = 1;
  const memory::GetEnv no_env = [](const char*) -> const char* { return nullptr; };
  device::DeviceManager manager(options, no_env);
  device::Device& opencl = manager.device("opencl:0");
  ASSERT_NE(opencl.shared_memory(), nullptr);
  constexpr std::int64_t kExamples = 256, kIn = 16, kBatch = 64;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(kExamples * kIn));
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 13 % 255);
  std::vector<std::uint8_t> labels(static_cast<std::size_t>(kExamples));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>(pixels[i * kIn] % 4);
  const data::Dataset dataset = data::Dataset::from_arrays(data::IdxArray::of<std::uint8_t>({kExamples, kIn}, pixels),
                                                           data::IdxArray::of<std::uint8_t>({kExamples}, labels))
                                    .normalize()
                                    .shuffle(5)
                                    .batch(kBatch)
                                    .prefetch(2);
  const auto losses = [&](device::Device& staging, const std::string& name) {
    train::Sequential model({kIn}, {{.units = 32, .activation = train::Activation::relu},
                                    {.units = 4, .activation = train::Activation::softmax}});
    model.compile({}, train::Strategy::one_device("opencl:0"), {.name = name, .devices = &manager});
    std::vector<double> result;
    data::BatchIterator batches = dataset.stage_on(staging).epoch(0);
    std::int64_t step = 0;
    while (const std::optional<data::Batch> batch = batches.next()) {
      EXPECT_EQ(&batch->features.device(), &staging);
      result.push_back(model.train_step(batch->features, batch->labels, ++step).loss);
    }
    return result;
  };
  const std::vector<double> host_staged = losses(manager.device("cpu:0"), "host_staged");
  const std::size_t shared_peak_before = opencl.shared_memory()->stats().peak_bytes_in_use;
  const std::vector<double> shared = losses(opencl, "shared");
  ASSERT_EQ(host_staged.size(), 4u);
  EXPECT_EQ(shared, host_staged);
  EXPECT_GT(opencl.shared_memory()->stats().peak_bytes_in_use, shared_peak_before);
}

// A session on opencl:0 fetching the loss: the loss is allocated in the device's shared memory (host-visible,
// tagged `fetched` with its name) and read without a staged copy, so each run stages one copy fewer than the
// same session with fetched results in device memory, with bitwise the same losses. The profiler records the
// shared allocations per tensor in an entry of their own ("opencl:0/shared", shared_of "opencl:0"): tags,
// events, peak breakdown and the snapshot JSON; the device memory's entry holds none of them.
TEST_F(OpenClSharedMemory, SessionFetchesAreReadInPlaceAndProfiledPerTensor) {
  constexpr std::int64_t kIn = 8, kHidden = 16, kClasses = 3, kRows = 16;
  constexpr int kSteps = 3;
  const memory::GetEnv no_env = [](const char*) -> const char* { return nullptr; };
  struct Result {
    std::vector<float> losses;
    std::uint64_t staged = 0;  // copies through opencl:0's staging memory during the runs
    profile::MemorySnapshot snapshot;
  };
  const auto run = [&](bool fetch_into_shared) {
    device::DeviceManagerOptions options;
    options.opencl_devices = 1;
    if (!fetch_into_shared) options.default_memory_config.shared_kinds = {};
    device::DeviceManager manager(options, no_env);
    device::Device& opencl = manager.device("opencl:0");
    device::Device& cpu = manager.device("cpu:0");
    runtime::testing::MlpGraph mlp = runtime::testing::build_mlp(kIn, kHidden, kClasses, "opencl:0");
    runtime::Session session(mlp.graph, {.devices = &manager});
    Result result;
    profile::MemoryProfiler profiler({&opencl});
    for (int step = 1; step <= kSteps; ++step) {
      const runtime::testing::Batch batch =
          runtime::testing::make_batch(kRows, kIn, kClasses, static_cast<std::uint32_t>(step));
      const runtime::FeedMap feeds = {{"x", Tensor::from_vector<float>(batch.x, Shape{kRows, kIn}, cpu)},
                                      {"labels", Tensor::from_vector<std::int32_t>(batch.labels, Shape{kRows}, cpu)}};
      if (step == 2) {  // the first run compiled the kernels and sized the arena; count from a steady step
        opencl.synchronize();
        result.staged = staged_copies(opencl);
      }
      const std::vector<Tensor> fetched = session.run(feeds, {mlp.loss}, mlp.updates, {.step = step});
      result.losses.push_back(fetched.at(0).to_vector<float>().at(0));
    }
    result.staged = staged_copies(opencl) - result.staged;
    result.snapshot = profiler.snapshot();
    return result;
  };
  const Result in_device_memory = run(false);
  const Result shared = run(true);
  EXPECT_EQ(shared.losses, in_device_memory.losses);
  // Steps 2 and 3 each read the loss: in place from shared memory, through staging from device memory.
  EXPECT_EQ(in_device_memory.staged - shared.staged, static_cast<std::uint64_t>(kSteps - 1))
      << "device memory path staged " << in_device_memory.staged << ", shared path " << shared.staged;

  // The device path's snapshot: one entry for opencl:0 and one, empty of fetches, for its shared memory.
  const auto entry = [](const profile::MemorySnapshot& snapshot, const std::string& name) {
    for (const profile::DeviceSnapshot& device : snapshot.devices) {
      if (device.device == name) return device;
    }
    ADD_FAILURE() << "the snapshot has no entry " << name;
    return profile::DeviceSnapshot{};
  };
  const auto fetched_tags = [](const profile::DeviceSnapshot& device) {
    std::vector<memory::AllocationTag> tags;
    for (const memory::AllocationTag& tag : device.tags) {
      if (tag.kind == memory::AllocationKind::fetched) tags.push_back(tag);
    }
    return tags;
  };
  EXPECT_TRUE(fetched_tags(entry(in_device_memory.snapshot, "opencl:0/shared")).empty());
  ASSERT_EQ(shared.snapshot.devices.size(), 2u);
  EXPECT_EQ(shared.snapshot.devices[0].device, "opencl:0");
  EXPECT_TRUE(shared.snapshot.devices[0].shared_of.empty());
  EXPECT_TRUE(fetched_tags(shared.snapshot.devices[0]).empty()) << "a fetched result was counted in device memory";
  const profile::DeviceSnapshot& shared_entry = shared.snapshot.devices[1];
  EXPECT_EQ(shared_entry.device, "opencl:0/shared");
  EXPECT_EQ(shared_entry.shared_of, "opencl:0");
  EXPECT_TRUE(shared_entry.recording);
  const std::vector<memory::AllocationTag> tags = fetched_tags(shared_entry);
  ASSERT_EQ(tags.size(), 1u);
  EXPECT_EQ(tags[0].name, "loss:0");
  EXPECT_EQ(tags[0].dtype, "float32");
  std::size_t allocations = 0, frees = 0;
  for (const profile::MemoryEvent& event : shared_entry.events) {
    if (shared_entry.tags.at(event.tag).kind != memory::AllocationKind::fetched) continue;
    EXPECT_EQ(event.requested_bytes, sizeof(float));
    allocations += event.action == profile::EventAction::allocate ? 1 : 0;
    frees += event.action == profile::EventAction::free ? 1 : 0;
  }
  EXPECT_EQ(allocations, static_cast<std::size_t>(kSteps));
  EXPECT_EQ(frees, static_cast<std::size_t>(kSteps));
  bool fetched_at_peak = false;
  for (const profile::BreakdownRow& row : shared_entry.peak.by_kind) fetched_at_peak |= row.key == "fetched";
  EXPECT_TRUE(fetched_at_peak);
  const nlohmann::json json = nlohmann::json::parse(profile::snapshot_json(shared.snapshot));
  EXPECT_EQ(json.at("devices").at(1).at("shared"), true);
  EXPECT_EQ(json.at("devices").at(1).at("shared_of"), "opencl:0");
  EXPECT_EQ(json.at("devices").at(0).at("shared"), false);
}

// A session on opencl:0 fed a batch assembled in the device's shared memory binds it as the feed's value: no
// copy on the device (OpenClDevice::copies_within), no slot in the step's arena (the plan declares the feeds on
// opencl:0 and the device peaks at exactly it), and bitwise the losses of the copy path, which feeds the same
// bytes from a shared buffer at an offset no planned value starts at (copied into the feeds' slots).
TEST_F(OpenClSharedMemory, SessionBindsAFedSharedBatchInPlace) {
  constexpr std::int64_t kIn = 8, kHidden = 16, kClasses = 3, kRows = 16;
  constexpr int kSteps = 3;
  const memory::GetEnv no_env = [](const char*) -> const char* { return nullptr; };
  struct Result {
    std::vector<float> losses;
    std::uint64_t copies = 0;  // copies within opencl:0 during the steady runs
    std::uint64_t staged = 0;  // copies through its staging memory meanwhile
    runtime::MemoryPlan plan;
    std::size_t measured_peak = 0;
  };
  const auto run = [&](bool in_place) {
    device::DeviceManagerOptions options;
    options.opencl_devices = 1;
    device::DeviceManager manager(options, no_env);
    device::Device& opencl = manager.device("opencl:0");
    auto& counted = dynamic_cast<OpenClDevice&>(opencl);
    runtime::testing::MlpGraph mlp = runtime::testing::build_mlp(kIn, kHidden, kClasses, "opencl:0");
    runtime::Session session(mlp.graph, {.devices = &manager});
    // The copy path's tensors start half a plan alignment into their buffers: not bound in place.
    const std::size_t offset = in_place ? 0 : compile::kPlanAlignment / 2;
    const auto shared_tensor = [&](const void* bytes, Shape shape, DType dtype, const char* name) {
      const std::size_t size = byte_size(shape, dtype);
      const std::shared_ptr<Buffer> buffer =
          opencl.allocate_shared(offset + size, {.name = name, .kind = memory::AllocationKind::staging});
      EXPECT_TRUE(buffer->host_visible());
      std::memcpy(static_cast<char*>(buffer->data()) + offset, bytes, size);
      return Tensor::from_buffer(buffer, offset, shape, dtype);
    };
    Result result;
    const runtime::FeedTypes types = {{"x", {DType::f32, {kRows, kIn}}}, {"labels", {DType::i32, {kRows}}}};
    result.plan = session.plan(
        types, {mlp.loss}, mlp.updates,
        in_place ? runtime::FeedDevices{{"x", "opencl:0"}, {"labels", "opencl:0"}} : runtime::FeedDevices{});
    opencl.memory().reset_peak();
    for (int step = 1; step <= kSteps; ++step) {
      const runtime::testing::Batch batch =
          runtime::testing::make_batch(kRows, kIn, kClasses, static_cast<std::uint32_t>(step));
      const runtime::FeedMap feeds = {
          {"x", shared_tensor(batch.x.data(), Shape{kRows, kIn}, DType::f32, "x")},
          {"labels", shared_tensor(batch.labels.data(), Shape{kRows}, DType::i32, "labels")}};
      if (step == 2) {  // the first run compiled the kernels and sized the arena; count from a steady step
        opencl.synchronize();
        result.copies = counted.copies_within();
        result.staged = staged_copies(opencl);
      }
      const std::vector<Tensor> fetched = session.run(feeds, {mlp.loss}, mlp.updates, {.step = step});
      result.losses.push_back(fetched.at(0).to_vector<float>().at(0));
    }
    opencl.synchronize();
    result.copies = counted.copies_within() - result.copies;
    result.staged = staged_copies(opencl) - result.staged;
    result.measured_peak = opencl.memory().stats().peak_bytes_requested;
    return result;
  };
  const Result copied = run(false);
  const Result bound = run(true);
  EXPECT_EQ(bound.losses, copied.losses);
  // Steps 2 and 3: the copy path copies x and the labels into their slots; bound in place, nothing is copied.
  EXPECT_EQ(copied.copies, static_cast<std::uint64_t>(2 * (kSteps - 1)));
  EXPECT_EQ(bound.copies, 0u);
  EXPECT_EQ(bound.staged, 0u) << "a fed shared batch or the loss went through staging";

  ASSERT_EQ(bound.plan.devices.size(), 1u);
  ASSERT_EQ(copied.plan.devices.size(), 1u);
  for (const runtime::PlannedTensor& tensor : bound.plan.tensors) {
    const bool fed = tensor.name == "x:0" || tensor.name == "labels:0";
    EXPECT_EQ(tensor.fed_in_place, fed) << tensor.name;
    if (fed) {
      EXPECT_EQ(tensor.planned_bytes, 0u) << tensor.name;
    }
  }
  for (const runtime::PlannedTensor& tensor : copied.plan.tensors) EXPECT_FALSE(tensor.fed_in_place) << tensor.name;
  EXPECT_LT(bound.plan.devices[0].arena_bytes, copied.plan.devices[0].arena_bytes);
  // The runs use the plan's step (declared the same way): the device holds exactly the planned peak.
  EXPECT_EQ(bound.measured_peak, bound.plan.devices[0].planned_peak_bytes);
  EXPECT_EQ(copied.measured_peak, copied.plan.devices[0].planned_peak_bytes);
}

}  // namespace
}  // namespace tp::backend::opencl

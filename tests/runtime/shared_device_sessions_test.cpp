// SPDX-License-Identifier: Apache-2.0
// Several sessions on one device under quotas: one that exceeds its quota fails naming itself and its quota
// while the others run on; a closed session's memory is available at once; sessions run concurrently
// (this test is in the ThreadSanitizer pass). Every case runs on each accelerator backend present (sim, and
// opencl where an OpenCL device exists).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "backend/support/backend_params.hpp"
#include "device/support/device_test_support.hpp"
#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/runtime/session.hpp"

namespace tp::runtime {
namespace {

constexpr std::int64_t kIn = 12, kClasses = 4, kRows = 32;

FeedMap feeds_of(device::DeviceManager& manager, std::uint32_t seed) {
  const auto batch = testing::make_batch(kRows, kIn, kClasses, seed);
  device::Device& cpu = manager.device("cpu:0");
  return {{"x", Tensor::from_vector<float>(batch.x, Shape{kRows, kIn}, cpu)},
          {"labels", Tensor::from_vector<std::int32_t>(batch.labels, Shape{kRows}, cpu)}};
}

// Devices whose accelerator `device` has `budget` bytes: sim devices of that size; an opencl device with
// that budget (its memory stack's limit) on PoCL's larger memory, growing region by region. (Preallocated,
// a budget below the device's memory is one BFC region whose unsplit remainder a session's quota would be
// charged in full; a sim device of exactly the budget sizes its regions differently.)
device::DeviceManagerOptions with_budget(const std::string& device, std::size_t budget) {
  device::DeviceManagerOptions options = testing::two_sim_devices(budget);
  if (device.rfind("opencl:", 0) == 0) {
    memory::MemoryConfig config;
    config.limit_bytes = budget;
    config.policy = memory::GrowthPolicy::grow;
    options.memory_configs[device::parse_device_id(device, "device")] = config;
  }
  return options;
}

// The parameter: the accelerator the sessions share ("sim:0", "opencl:0").
class SharedDeviceSessions : public ::testing::TestWithParam<std::string> {};

TEST_P(SharedDeviceSessions, OneSessionHittingItsQuotaDoesNotDisturbTheOther) {
  device::DeviceManager manager(with_budget(GetParam(), 64 * kMiB), testing::kNoEnv);
  const testing::MlpGraph small = testing::build_mlp(kIn, 16, kClasses, GetParam());
  const testing::MlpGraph large = testing::build_mlp(kIn, 4096, kClasses, GetParam());  // ~1.7 MiB of state
  Session modest(small.graph, {.name = "modest", .memory_quota_bytes = 4 * kMiB, .devices = &manager});
  Session greedy(large.graph, {.name = "greedy", .memory_quota_bytes = 1 * kMiB, .devices = &manager});
  modest.run(feeds_of(manager, 1), {small.loss}, small.updates);
  try {
    greedy.run(feeds_of(manager, 1), {large.loss}, large.updates);
    FAIL() << "the greedy session ran past its 1 MiB quota";
  } catch (const OutOfMemoryError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("greedy"), std::string::npos) << what;
    EXPECT_NE(what.find("1.00 MiB"), std::string::npos) << what;
  }
  // The other session runs on, and the greedy one holds nothing after its failure is cleaned up by close().
  for (int step = 2; step <= 5; ++step) modest.run(feeds_of(manager, 2), {small.loss}, small.updates, {.step = step});
  greedy.close();
  EXPECT_EQ(greedy.closed(), true);
  EXPECT_EQ(manager.device(GetParam()).memory().stats().bytes_requested,
            modest.memory_stats(GetParam()).bytes_requested);
}

TEST_P(SharedDeviceSessions, AClosedSessionsMemoryIsAvailableAtOnce) {
  const testing::MlpGraph big = testing::build_mlp(kIn, 20000, kClasses, GetParam());
  const FeedTypes types = {{"x", {DType::f32, {kRows, kIn}}}, {"labels", {DType::i32, {kRows}}}};
  std::size_t peak = 0;
  {
    device::DeviceManager probe(testing::two_sim_devices(), testing::kNoEnv);
    peak =
        Session(big.graph, {.devices = &probe}).plan(types, {big.loss}, big.updates).devices.at(0).planned_peak_bytes;
  }
  // A budget that holds one session's step but not two; each session may take 1.2x what it needs.
  const std::size_t budget = memory::round_up(peak + peak / 2, kMiB);
  const std::size_t quota = memory::round_up(peak + peak / 5, kMiB);
  device::DeviceManager manager(with_budget(GetParam(), budget), testing::kNoEnv);
  auto first = std::make_unique<Session>(
      big.graph, SessionOptions{.name = "first", .memory_quota_bytes = quota, .devices = &manager});
  first->run(feeds_of(manager, 1), {big.loss}, big.updates);
  Session second(big.graph, {.name = "second", .memory_quota_bytes = quota, .devices = &manager});
  EXPECT_THROW(second.run(feeds_of(manager, 1), {big.loss}, big.updates), OutOfMemoryError);
  first->close();
  EXPECT_NO_THROW(second.run(feeds_of(manager, 1), {big.loss}, big.updates));
}

TEST_P(SharedDeviceSessions, SessionsRunConcurrentlyOnOneDevice) {
  device::DeviceManager manager(testing::two_sim_devices(), testing::kNoEnv);
  const testing::MlpGraph mlp = testing::build_mlp(kIn, 16, kClasses, GetParam());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int session_index = 0; session_index < 4; ++session_index) {
    threads.emplace_back([&, session_index] {
      try {
        Session session(
            mlp.graph,
            {.name = "s" + std::to_string(session_index), .memory_quota_bytes = 8 * kMiB, .devices = &manager});
        for (int step = 1; step <= 20; ++step) {
          session.run(feeds_of(manager, static_cast<std::uint32_t>(step)), {mlp.loss}, mlp.updates, {.step = step});
        }
      } catch (...) {
        ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(manager.device(GetParam()).memory().stats().bytes_requested, 0u);
}

INSTANTIATE_TEST_SUITE_P(Accelerators, SharedDeviceSessions,
                         ::testing::ValuesIn(device::testing::accelerator_device_names()),
                         backend::testing::backend_test_name);

}  // namespace
}  // namespace tp::runtime

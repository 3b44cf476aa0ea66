// SPDX-License-Identifier: Apache-2.0
// The memory profiler's recorder and query API on every accelerator present (sim, opencl): recording is off until a
// MemoryProfiler exists; events, live set, peak breakdown, per-op high-water marks and the bounded ring are
// exact; memory_info / reset_memory_stats / memory_summary agree with the stack; a refused allocation writes an
// out-of-memory snapshot while everything is still live; a device's shared memory is recorded per tensor in an
// entry of its own.
#include "tensorpool/profile/memory_profiler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/memory_config.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace {

using tp::kMiB;
using tp::memory::AllocationKind;
using tp::memory::AllocationTag;
namespace profile = tp::profile;

AllocationTag tag(const std::string& name, const std::string& op, AllocationKind kind) {
  return {name, op, {static_cast<std::int64_t>(name.size())}, "float32", kind, 3};
}

// On every accelerator backend present (sim, and opencl where an OpenCL device exists).
class ProfilerTest : public ::testing::TestWithParam<tp::device::testing::Backend> {
 protected:
  std::unique_ptr<tp::device::Device> device_ = tp::device::testing::make_device(GetParam(), 64 * kMiB);
  std::vector<tp::device::Device*> devices() { return {device_.get()}; }
};

std::size_t sum_allocated(const std::vector<profile::BreakdownRow>& rows) {
  return std::accumulate(
      rows.begin(), rows.end(), std::size_t{0},
      [](std::size_t total, const profile::BreakdownRow& row) { return total + row.allocated_bytes; });
}

TEST_P(ProfilerTest, NothingIsRecordedWithoutAProfilerButLiveTensorsAreStillReported) {
  auto kernel = device_->allocate(kMiB, tag("dense/kernel", "Variable", AllocationKind::parameter));
  const profile::MemorySnapshot snapshot = profile::memory_snapshot(devices());
  // A device with shared memory (opencl with fine-grained SVM) is followed by that memory's entry.
  ASSERT_EQ(snapshot.devices.size(), device_->shared_memory() != nullptr ? 2u : 1u);
  const profile::DeviceSnapshot& device = snapshot.devices[0];
  EXPECT_TRUE(device.shared_of.empty());
  EXPECT_FALSE(device.recording);
  EXPECT_TRUE(device.events.empty());
  ASSERT_EQ(device.live.size(), 1u);
  EXPECT_EQ(device.tags.at(device.live[0].tag).name, "dense/kernel");
  EXPECT_EQ(device.live[0].requested_bytes, kMiB);
}

TEST_P(ProfilerTest, RecordsEveryAllocationAndFreeWithItsTag) {
  profile::MemoryProfiler profiler(devices());
  auto kernel = device_->allocate(kMiB, tag("dense/kernel", "Variable", AllocationKind::parameter));
  auto relu = device_->allocate(1000, tag("dense/Relu:0", "Relu", AllocationKind::activation));
  relu.reset();
  const profile::MemorySnapshot snapshot = profiler.snapshot();
  const profile::DeviceSnapshot& device = snapshot.devices.at(0);
  EXPECT_TRUE(device.recording);
  ASSERT_EQ(device.events.size(), 3u);
  EXPECT_EQ(device.events[0].action, profile::EventAction::allocate);
  EXPECT_EQ(device.tags.at(device.events[0].tag).name, "dense/kernel");
  EXPECT_EQ(device.events[0].step, 3);
  EXPECT_EQ(device.events[1].requested_bytes, 1000u);
  EXPECT_EQ(device.events[1].allocated_bytes, 1024u);  // BFC's 256-byte rounding
  EXPECT_EQ(device.events[2].action, profile::EventAction::free);
  EXPECT_EQ(device.events[2].address, device.events[1].address);
  for (std::size_t index = 0; index < device.events.size(); ++index) EXPECT_EQ(device.events[index].sequence, index);
  ASSERT_EQ(device.live.size(), 1u);
  EXPECT_EQ(device.events.back().in_use_bytes, device.stats.bytes_in_use);
  EXPECT_EQ(device.total_allocated_bytes, kMiB + 1024);
  EXPECT_EQ(device.total_freed_bytes, 1024u);
}

TEST_P(ProfilerTest, ThePeakBreakdownIsWhatWasLiveAtThePeakByKindAndByOp) {
  profile::MemoryProfiler profiler(devices());
  auto kernel = device_->allocate(kMiB, tag("dense/kernel", "Variable", AllocationKind::parameter));
  auto big = device_->allocate(4 * kMiB, tag("dense/MatMul:0", "MatMul", AllocationKind::activation));
  auto moment = device_->allocate(2 * kMiB, tag("dense/kernel/adam_m", "Variable", AllocationKind::optimizer_state));
  big.reset();
  auto later = device_->allocate(kMiB, tag("dense/Relu:0", "Relu", AllocationKind::activation));
  const profile::DeviceSnapshot device = profiler.snapshot().devices.at(0);
  EXPECT_EQ(device.peak.in_use_bytes, 7 * kMiB);
  EXPECT_EQ(device.peak.in_use_bytes, device.stats.peak_bytes_in_use);
  EXPECT_EQ(sum_allocated(device.peak.by_kind), device.peak.in_use_bytes);
  EXPECT_EQ(sum_allocated(device.peak.by_op), device.peak.in_use_bytes);
  ASSERT_FALSE(device.peak.by_kind.empty());
  EXPECT_EQ(device.peak.by_kind[0].key, "activation");  // largest first
  EXPECT_EQ(device.peak.by_kind[0].allocated_bytes, 4 * kMiB);
  ASSERT_EQ(device.peak.tensors.size(), 3u);
  EXPECT_EQ(device.tags.at(device.peak.tensors[0].tag).name, "dense/MatMul:0");
  EXPECT_EQ(device.peak.by_op[0].key, "MatMul");
  ASSERT_FALSE(device.peak.segments.empty());  // the segment map as it was at the peak
}

TEST_P(ProfilerTest, PerOpHighWaterMarksKeepTheMostBytesAnOpHeldAtOnce) {
  profile::MemoryProfiler profiler(devices());
  auto first = device_->allocate(kMiB, tag("a", "MatMul", AllocationKind::activation));
  auto second = device_->allocate(kMiB, tag("b", "MatMul", AllocationKind::activation));
  first.reset();
  second.reset();
  auto third = device_->allocate(kMiB, tag("c", "MatMul", AllocationKind::activation));
  const profile::DeviceSnapshot device = profiler.snapshot().devices.at(0);
  ASSERT_EQ(device.op_high_water.size(), 1u);
  EXPECT_EQ(device.op_high_water[0].op, "MatMul");
  EXPECT_EQ(device.op_high_water[0].high_water_bytes, 2 * kMiB);
  EXPECT_EQ(device.op_high_water[0].current_bytes, kMiB);
  EXPECT_EQ(device.op_high_water[0].allocations, 3u);
}

TEST_P(ProfilerTest, TheRingIsBoundedAndItsBaselineKeepsTheDroppedBytes) {
  profile::MemoryProfiler profiler(devices(), {.max_events_per_device = 4});
  std::vector<std::shared_ptr<tp::Buffer>> buffers;
  for (int index = 0; index < 10; ++index) {
    buffers.push_back(
        device_->allocate(256 * (index + 1), tag("t" + std::to_string(index), "Op", AllocationKind::activation)));
  }
  const profile::DeviceSnapshot device = profiler.snapshot().devices.at(0);
  ASSERT_EQ(device.events.size(), 4u);
  EXPECT_EQ(device.dropped_events, 6u);
  EXPECT_EQ(device.events.front().sequence, 6u);  // oldest retained first
  const auto activation = static_cast<std::size_t>(AllocationKind::activation);
  EXPECT_EQ(device.baseline_by_kind[activation], 256u * (1 + 2 + 3 + 4 + 5 + 6));
}

TEST_P(ProfilerTest, MemoryInfoAndResetFollowTheStack) {
  profile::MemoryProfiler profiler(devices());
  auto kept = device_->allocate(kMiB, tag("kept", "Variable", AllocationKind::parameter));
  { auto brief = device_->allocate(3 * kMiB, tag("brief", "MatMul", AllocationKind::activation)); }
  profile::MemoryInfo info = profile::memory_info(*device_);
  EXPECT_EQ(info.current, kMiB);
  EXPECT_GE(info.peak, 4 * kMiB);  // BFC may hand the 3 MiB request a whole 4 MiB chunk
  EXPECT_EQ(info.peak, device_->memory().stats().peak_bytes_in_use);
  EXPECT_EQ(info.peak, profiler.snapshot().devices.at(0).peak.in_use_bytes);
  profile::reset_memory_stats(*device_);
  info = profile::memory_info(*device_);
  EXPECT_EQ(info.peak, kMiB);
  const profile::DeviceSnapshot device = profiler.snapshot().devices.at(0);
  EXPECT_EQ(device.peak.in_use_bytes, kMiB);
  ASSERT_EQ(device.op_high_water.size(), 2u);
  for (const profile::OpHighWater& op : device.op_high_water) EXPECT_EQ(op.high_water_bytes, op.current_bytes);
}

TEST_P(ProfilerTest, TheSummaryTableHasEveryRowAndColumn) {
  profile::MemoryProfiler profiler(devices());
  auto kept = device_->allocate(kMiB, tag("kept", "Variable", AllocationKind::parameter));
  const std::string table = profile::memory_summary(*device_);
  for (const char* word :
       {"current", "peak", "total allocated", "total freed", "in use", "reserved", "requested", "largest free",
        "external frag.", "internal frag.", "allocs", "OOMs", "retries", "compactions", "0 B moved", "1.00 MiB"}) {
    EXPECT_NE(table.find(word), std::string::npos) << word << " missing from\n" << table;
  }
}

TEST_P(ProfilerTest, SegmentBlocksNameTheTensorsInThem) {
  profile::MemoryProfiler profiler(devices());
  auto kernel = device_->allocate(kMiB, tag("dense/kernel", "Variable", AllocationKind::parameter));
  const profile::DeviceSnapshot device = profiler.snapshot().devices.at(0);
  std::size_t tagged = 0;
  for (const profile::SnapshotSegment& segment : device.segments) {
    std::size_t covered = 0;
    for (const profile::SnapshotBlock& block : segment.blocks) {
      EXPECT_EQ(block.offset, covered);  // blocks cover the segment without gaps
      covered += block.size;
      if (block.tag) {
        ++tagged;
        EXPECT_EQ(device.tags.at(*block.tag).name, "dense/kernel");
      }
    }
    EXPECT_EQ(covered, segment.size);
  }
  EXPECT_EQ(tagged, 1u);
}

TEST_P(ProfilerTest, ARefusedAllocationWritesAnOutOfMemorySnapshotWhileEverythingIsLive) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tp_oom_snapshot_" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(path);
  profile::MemoryProfiler profiler(devices(), {.oom_snapshot_path = path.string()});
  auto held = device_->allocate(40 * kMiB, tag("held", "MatMul", AllocationKind::activation));
  EXPECT_THROW(device_->allocate(40 * kMiB, tag("too_big", "MatMul", AllocationKind::activation)),
               tp::OutOfMemoryError);
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "no snapshot at " << path;
  const nlohmann::json json = nlohmann::json::parse(in);
  EXPECT_EQ(json.at("reason"), "out of memory on " + device_->name());
  const nlohmann::json& device = json.at("devices").at(0);
  EXPECT_EQ(device.at("failures"), 1);
  ASSERT_EQ(device.at("live").size(), 1u);
  EXPECT_EQ(device.at("live").at(0).at("requested_bytes"), 40 * kMiB);
  const nlohmann::json& last = device.at("events").at("rows").back();
  EXPECT_EQ(last.at(0), "failure");
  EXPECT_EQ(device.at("tags").at(last.at(1).get<std::size_t>()).at("name"), "too_big");
  std::filesystem::remove(path);
}

TEST_P(ProfilerTest, ADeviceTakesOneProfilerAtATime) {
  profile::MemoryProfiler first(devices());
  EXPECT_THROW(profile::MemoryProfiler second(devices()), tp::InvalidArgument);
}

TEST_P(ProfilerTest, AllocationsFromBeforeTheProfilerAreSeededAndTheirFreesCount) {
  auto early = device_->allocate(kMiB, tag("early", "Variable", AllocationKind::parameter));
  profile::MemoryProfiler profiler(devices());
  early.reset();
  const profile::DeviceSnapshot device = profiler.snapshot().devices.at(0);
  EXPECT_TRUE(device.live.empty());
  ASSERT_EQ(device.events.size(), 1u);
  EXPECT_EQ(device.events[0].action, profile::EventAction::free);
  EXPECT_EQ(device.events[0].in_use_bytes, 0u);
}

TEST_P(ProfilerTest, ThreadsAllocatingWhileAnotherSnapshotsLoseNoEvent) {
  constexpr int kThreads = 4, kPairs = 500;
  profile::MemoryProfiler profiler(devices(), {.max_events_per_device = 2 * kThreads * kPairs});
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const profile::DeviceSnapshot device = profiler.snapshot().devices.at(0);
      EXPECT_GE(device.peak.in_use_bytes, device.events.empty() ? 0 : device.events.back().in_use_bytes);
    }
  });
  std::vector<std::thread> workers;
  for (int thread = 0; thread < kThreads; ++thread) {
    workers.emplace_back([&, thread] {
      for (int pair = 0; pair < kPairs; ++pair) {
        auto buffer = device_->allocate(256 * static_cast<std::size_t>(1 + (pair + thread) % 7),
                                        tag("t" + std::to_string(thread), "Op", AllocationKind::temporary));
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  done = true;
  reader.join();
  const profile::DeviceSnapshot device = profiler.snapshot().devices.at(0);
  EXPECT_EQ(device.events.size(), 2u * kThreads * kPairs);
  EXPECT_EQ(device.dropped_events, 0u);
  EXPECT_EQ(device.events.back().in_use_bytes, 0u);
  EXPECT_EQ(device.total_allocated_bytes, device.total_freed_bytes);
  EXPECT_TRUE(device.live.empty());
  EXPECT_EQ(device.tags.size(), static_cast<std::size_t>(kThreads));  // interned once per tensor
}

// Shared memory is recorded per tensor like device memory, in an entry of its own after the device's
// ("opencl:0/shared", shared_of "opencl:0"): tags, events, live set, peak breakdown; the device's entry holds
// none of it. On a device without shared memory, allocate_shared falls back to device memory and is recorded
// there, with no second entry.
TEST_P(ProfilerTest, SharedMemoryIsRecordedPerTensorInAnEntryOfItsOwn) {
  profile::MemoryProfiler profiler(devices());
  auto kernel = device_->allocate(kMiB, tag("dense/kernel", "Variable", AllocationKind::parameter));
  auto batch = device_->allocate_shared(2 * kMiB, tag("batch/x", "Dataset", AllocationKind::staging));
  { auto loss = device_->allocate_shared(4, tag("loss:0", "Mean", AllocationKind::fetched)); }
  const profile::MemorySnapshot snapshot = profiler.snapshot();
  const auto names = [](const profile::DeviceSnapshot& entry) {
    std::vector<std::string> live;
    for (const profile::LiveTensor& tensor : entry.live) live.push_back(entry.tags.at(tensor.tag).name);
    return live;
  };
  if (device_->shared_memory() == nullptr) {
    ASSERT_EQ(snapshot.devices.size(), 1u);
    EXPECT_EQ(names(snapshot.devices[0]), (std::vector<std::string>{"dense/kernel", "batch/x"}));
    return;
  }
  ASSERT_EQ(snapshot.devices.size(), 2u);
  const profile::DeviceSnapshot& own = snapshot.devices[0];
  const profile::DeviceSnapshot& shared = snapshot.devices[1];
  EXPECT_EQ(names(own), (std::vector<std::string>{"dense/kernel"}));
  EXPECT_EQ(own.peak.in_use_bytes, kernel->allocated_bytes());
  EXPECT_EQ(shared.device, device_->shared_memory()->config().device);
  EXPECT_EQ(shared.shared_of, device_->name());
  ASSERT_TRUE(shared.recording);
  EXPECT_EQ(names(shared), (std::vector<std::string>{"batch/x"}));
  ASSERT_EQ(shared.events.size(), 3u);  // batch/x allocated, loss:0 allocated and freed
  EXPECT_EQ(shared.tags.at(shared.events[1].tag).name, "loss:0");
  EXPECT_EQ(shared.events[2].action, profile::EventAction::free);
  EXPECT_EQ(shared.peak.tensors.size(), 2u);
  std::vector<std::string> kinds;
  for (const profile::BreakdownRow& row : shared.peak.by_kind) kinds.push_back(row.key);
  EXPECT_EQ(kinds, (std::vector<std::string>{"staging", "fetched"}));
  EXPECT_EQ(shared.stats.bytes_in_use, batch->allocated_bytes());
  EXPECT_EQ(profile::memory_info(*device_).shared_current, batch->allocated_bytes());
}

// A sharded expandable arena (MemoryConfig::arena_shards): one segment per shard, each naming the tensor a
// thread allocated in it.
TEST(ProfilerSegments, AShardedArenaShowsASegmentPerShard) {
  tp::memory::MemoryConfig config = tp::device::testing::grow_config("sim", 64 * kMiB);
  config.allocator = tp::memory::AllocatorKind::expandable;
  config.arena_shards = 2;
  const tp::device::DeviceId id{tp::device::DeviceKind::sim, 0};
  std::unique_ptr<tp::device::Device> device = tp::device::make_sim_device(id, id, 64 * kMiB, config, {});
  profile::MemoryProfiler profiler({device.get()});
  std::barrier both(2);
  std::vector<std::shared_ptr<tp::Buffer>> held(2);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      both.arrive_and_wait();  // both threads run before either allocates
      held[t] = device->allocate((t + 1) * kMiB, tag("t" + std::to_string(t), "MatMul", AllocationKind::activation));
      both.arrive_and_wait();
    });
  }
  for (std::thread& thread : threads) thread.join();
  const profile::DeviceSnapshot snapshot = profiler.snapshot().devices.at(0);
  ASSERT_EQ(snapshot.segments.size(), 2u);
  std::vector<std::string> names;
  for (const profile::SnapshotSegment& segment : snapshot.segments) {
    for (const profile::SnapshotBlock& block : segment.blocks) {
      if (block.tag) names.push_back(snapshot.tags.at(*block.tag).name);
    }
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"t0", "t1"}));
}

INSTANTIATE_TEST_SUITE_P(Accelerators, ProfilerTest, ::testing::ValuesIn(tp::device::testing::queued_backends()),
                         tp::device::testing::backend_param_name);

}  // namespace

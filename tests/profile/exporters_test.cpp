// SPDX-License-Identifier: Apache-2.0
// The snapshot's exporters: JSON that follows the documented schema, a Chrome trace whose slices pair each
// allocation with its free, an RMM trace that validates and replays to the recorded peak, and an HTML page that
// is self-contained and cannot be broken out of by a tensor name; a tensor compaction moved stays one tensor.
#include "tensorpool/profile/exporters.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "device/support/device_test_support.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/memory/trace.hpp"
#include "tensorpool/profile/memory_profiler.hpp"

namespace {

using tp::kMiB;
using tp::memory::AllocationKind;
namespace profile = tp::profile;

class ExportersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    profiler_ = std::make_unique<profile::MemoryProfiler>(std::vector<tp::device::Device*>{device_.get()});
    kernel_ = device_->allocate(kMiB, {"dense/kernel", "Variable", {512, 512}, "float32", AllocationKind::parameter});
    auto activation =
        device_->allocate(3 * kMiB, {"dense/MatMul:0", "MatMul", {32, 512}, "float32", AllocationKind::activation, 1});
    auto hostile = device_->allocate(1000, {"</script><b>x", "Op", {}, "", AllocationKind::temporary, 1});
    activation.reset();
    hostile.reset();
    profiler_->set_planned_peak("sim:0", 5 * kMiB);
    snapshot_ = profiler_->snapshot();
  }
  std::unique_ptr<tp::device::Device> device_ =
      tp::device::testing::make_device(tp::device::testing::Backend::sim, 64 * kMiB);
  std::unique_ptr<profile::MemoryProfiler> profiler_;
  std::shared_ptr<tp::Buffer> kernel_;
  profile::MemorySnapshot snapshot_;
};

TEST_F(ExportersTest, SnapshotJsonFollowsTheSchema) {
  const nlohmann::json json = nlohmann::json::parse(profile::snapshot_json(snapshot_));
  EXPECT_EQ(json.at("schema"), "tensorpool.memory_snapshot");
  EXPECT_EQ(json.at("version"), 1);
  const nlohmann::json& device = json.at("devices").at(0);
  EXPECT_EQ(device.at("device"), "sim:0");
  EXPECT_EQ(device.at("planned_peak_bytes"), 5 * kMiB);
  EXPECT_EQ(device.at("stats").at("peak_bytes_in_use"), snapshot_.devices[0].stats.peak_bytes_in_use);
  for (const char* key :
       {"allocator", "policy", "capacity_bytes", "limit_bytes", "recording", "total_allocated_bytes",
        "total_freed_bytes", "failures", "tags", "segments", "live", "peak", "op_high_water", "events"}) {
    EXPECT_TRUE(device.contains(key)) << key;
  }
  const nlohmann::json& events = device.at("events");
  EXPECT_EQ(events.at("rows").size(), 5u);  // 3 allocations, 2 frees
  EXPECT_EQ(events.at("columns").size(), events.at("rows").at(0).size());
  EXPECT_EQ(device.at("live").size(), 1u);
  EXPECT_EQ(device.at("peak").at("tensors").size(), 3u);
  EXPECT_FALSE(device.at("peak").at("segments").empty());
  EXPECT_EQ(device.at("tags").at(0).at("shape"), nlohmann::json({512, 512}));
  EXPECT_EQ(device.at("tags").at(0).at("kind"), "parameter");
  const nlohmann::json& block = device.at("segments").at(0).at("blocks").at(0);
  for (const char* key : {"offset", "size", "requested_bytes", "state", "tag"}) EXPECT_TRUE(block.contains(key)) << key;
}

TEST_F(ExportersTest, ChromeTracePairsEachTensorsAllocationWithItsFree) {
  const nlohmann::json json = nlohmann::json::parse(profile::chrome_trace_json(snapshot_));
  std::size_t counters = 0, begins = 0, ends = 0;
  std::set<std::string> names;
  for (const nlohmann::json& event : json.at("traceEvents")) {
    const std::string phase = event.at("ph");
    if (phase == "C") {
      ++counters;
      EXPECT_TRUE(event.at("args").contains("in_use"));
      EXPECT_TRUE(event.at("args").contains("reserved"));
    }
    if (phase == "b") {
      ++begins;
      names.insert(event.at("name").get<std::string>());
    }
    if (phase == "e") ++ends;
  }
  EXPECT_EQ(counters, 5u);
  EXPECT_EQ(begins, 3u);  // two freed tensors and the kernel, still live, closed at the last event
  EXPECT_EQ(ends, 3u);
  EXPECT_TRUE(names.contains("dense/MatMul:0"));
}

TEST_F(ExportersTest, TheRecordedTraceValidatesAndItsPeakIsTheRequestedPeak) {
  const tp::memory::Trace trace = profile::recorded_trace(snapshot_);
  EXPECT_EQ(trace.allocation_count(), 3u);
  EXPECT_EQ(trace.free_count(), 2u);
  EXPECT_EQ(trace.peak_live_bytes(), snapshot_.devices[0].stats.peak_bytes_requested);
  std::stringstream csv;
  tp::memory::write_trace(csv, trace);
  const tp::memory::Trace read = tp::memory::read_trace(csv, "recorded.csv");
  EXPECT_EQ(read.events(), trace.events());
}

TEST_F(ExportersTest, TheRecordedTraceLeavesOutFreesOfAllocationsOlderThanTheRing) {
  profiler_.reset();
  profile::MemoryProfiler small({device_.get()}, {.max_events_per_device = 1});
  kernel_.reset();  // a free whose allocation was never recorded by this profiler
  auto next = device_->allocate(kMiB, {"next", "Op", {}, "", AllocationKind::activation});
  next.reset();
  const tp::memory::Trace trace = profile::recorded_trace(small.snapshot());
  EXPECT_EQ(trace.size(), 0u);  // the ring kept only the last free, whose allocation it dropped
}

TEST_F(ExportersTest, TheHtmlReportIsSelfContainedAndEscapesTheSnapshot) {
  const std::string page = profile::html_report(snapshot_);
  EXPECT_EQ(page.find("TP_REPORT_"), std::string::npos);  // every placeholder filled
  EXPECT_NE(page.find("window.tpReport"), std::string::npos);
  EXPECT_NE(page.find("--activation"), std::string::npos);  // the CSS
  EXPECT_EQ(page.find("</script><b>"), std::string::npos);
  EXPECT_NE(page.find("<\\/script><b>x"), std::string::npos);
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg"));  // no network reference but SVG's namespace
  EXPECT_EQ(page.find("https://"), std::string::npos);
}

// A tensor that compaction moves (Device::compact on an expandable device) is one relocate event: the JSON
// names where it came from, its Chrome slice runs from its allocation to its free at the new address, and the
// recorded trace frees it at the old address and allocates it at the new one, so the trace still validates.
TEST(ExportersRelocation, AMovedTensorIsOneRelocateEventThatEveryExporterFollows) {
  tp::memory::MemoryConfig config = tp::device::testing::grow_config("sim", 16 * kMiB);
  config.allocator = tp::memory::AllocatorKind::expandable;
  const std::unique_ptr<tp::device::Device> device = tp::device::make_sim_device(
      {tp::device::DeviceKind::sim, 0}, {tp::device::DeviceKind::sim, 0}, 64 * kMiB, config, {});
  profile::MemoryProfiler profiler({device.get()});
  auto gone = device->allocate(1536 * 1024, {"gone", "Op", {}, "", AllocationKind::activation});
  std::shared_ptr<tp::Buffer> moved = device->allocate(1536 * 1024, {"moved", "Op", {}, "", AllocationKind::parameter});
  gone.reset();
  std::vector<std::shared_ptr<tp::Buffer>> movable = {moved};
  ASSERT_EQ(device->compact(movable).blocks_moved, 1u);
  profile::MemorySnapshot snapshot = profiler.snapshot();
  const std::vector<profile::MemoryEvent>& events = snapshot.devices.at(0).events;
  ASSERT_EQ(events.size(), 4u);  // allocate gone, allocate moved, free gone, relocate moved
  const profile::MemoryEvent& relocate = events.back();
  EXPECT_EQ(relocate.action, profile::EventAction::relocate);
  EXPECT_EQ(relocate.moved_from, events[1].address);
  EXPECT_EQ(relocate.address, events[0].address) << "moved down into the freed block";
  EXPECT_EQ(relocate.in_use_bytes, events[2].in_use_bytes) << "a move changes no byte count";
  EXPECT_EQ(relocate.reserved_bytes, events[2].reserved_bytes) << "the allocator's figures of the event before";
  EXPECT_EQ(relocate.largest_free_block, events[2].largest_free_block);

  const nlohmann::json json = nlohmann::json::parse(profile::snapshot_json(snapshot));
  const nlohmann::json& rows = json.at("devices").at(0).at("events").at("rows");
  EXPECT_EQ(rows.at(3).at(0), "relocate");
  EXPECT_EQ(rows.at(3).back(), rows.at(1).at(2)) << "moved_from is the address it was allocated at";
  EXPECT_TRUE(rows.at(0).back().is_null());

  moved.reset();
  movable.clear();
  const auto later = device->allocate(kMiB, {"later", "Op", {}, "", AllocationKind::activation});
  snapshot = profiler.snapshot();
  ASSERT_EQ(snapshot.devices.at(0).events.size(), 6u);
  const nlohmann::json trace = nlohmann::json::parse(profile::chrome_trace_json(snapshot));
  double moved_end = -1, last = -1;
  std::size_t begins = 0, instants = 0;
  for (const nlohmann::json& event : trace.at("traceEvents")) {
    if (event.contains("ts")) last = std::max(last, event.at("ts").get<double>());
    begins += event.at("ph") == "b" ? 1 : 0;
    instants += event.at("ph") == "i" ? 1 : 0;
    if (event.at("ph") == "e" && event.at("name") == "moved") moved_end = event.at("ts").get<double>();
  }
  EXPECT_EQ(begins, 3u);
  EXPECT_EQ(instants, 0u) << "a move is not an out-of-memory mark";
  EXPECT_GE(moved_end, 0.0);
  EXPECT_LT(moved_end, last) << "the moved tensor's slice ends at its free at the new address, before the end";

  const tp::memory::Trace recorded = profile::recorded_trace(snapshot);
  EXPECT_EQ(recorded.allocation_count(), 4u);  // gone, moved, moved again at its new address, later
  EXPECT_EQ(recorded.free_count(), 3u);
  std::stringstream csv;
  tp::memory::write_trace(csv, recorded);
  EXPECT_EQ(tp::memory::read_trace(csv, "recorded.csv").events(), recorded.events());
}

}  // namespace

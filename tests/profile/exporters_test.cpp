// SPDX-License-Identifier: Apache-2.0
// The snapshot's exporters: JSON that follows the documented schema, a Chrome trace whose slices pair each
// allocation with its free, an RMM trace that validates and replays to the recorded peak, and an HTML page that
// is self-contained and cannot be broken out of by a tensor name.
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

}  // namespace

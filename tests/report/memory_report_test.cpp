// SPDX-License-Identifier: Apache-2.0
// The memory reports (report/): the estimate's rows add up to its per-device totals and its JSON says the same;
// the out-of-memory advice names the largest batch the replay lets fit, in the caller's words (AdviceWords:
// the CLI's flags by default, another front end's terms when given); the memory summary's data, text and
// JSON agree with the plan; fragmentation reads the same in the summary, the profiler's table and snapshot,
// and the out-of-memory report for one state of the stack.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/support/mlp_graph.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/fragmentation.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/profile/exporters.hpp"
#include "tensorpool/profile/memory_profiler.hpp"
#include "tensorpool/report/memory_estimate.hpp"
#include "tensorpool/report/memory_summary.hpp"
#include "tensorpool/report/oom_advice.hpp"
#include "tensorpool/report/profile_output.hpp"
#include "tensorpool/train/sequential.hpp"

namespace tp::report {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A 784-512-10 MLP with Adam on sim:0: about 6 MiB of variables after rounding.
class MemoryReport : public ::testing::Test {
 protected:
  explicit MemoryReport(std::size_t sim_memory = 8 * kMiB)
      : manager_(runtime::testing::two_sim_devices(sim_memory), runtime::testing::kNoEnv),
        model_({784}, {{.units = 512, .activation = train::Activation::relu},
                       {.units = 10, .activation = train::Activation::softmax}}) {
    model_.compile({}, train::Strategy::one_device("sim:0"), {.name = "report", .devices = &manager_});
    devices_ = named_devices(manager_, {"sim:0"});
  }

  device::DeviceManager manager_;
  train::Sequential model_;
  std::vector<device::Device*> devices_;
};

TEST_F(MemoryReport, EstimateRowsAddUpToTheDeviceTotals) {
  const MemoryEstimate estimate =
      estimate_memory(model_.plan(32), model_, devices_, 32, {.arena_name = "report/arena"});
  ASSERT_EQ(estimate.devices.size(), 1u);
  const DeviceEstimate& device = estimate.devices.front();
  EXPECT_EQ(device.planned_peak_bytes, device.variable_bytes + device.arena_bytes);
  EXPECT_GE(device.planned_peak_allocated_bytes, device.planned_peak_bytes);
  EXPECT_EQ(device.limit_bytes, 8 * kMiB);
  std::size_t variables = 0;
  bool arena_row = false;
  for (const EstimateRow& row : estimate.rows) {
    if (row.placement == "variable") variables += row.bytes;
    if (row.placement == "arena") {
      arena_row = true;
      EXPECT_EQ(row.name, "report/arena");
      EXPECT_EQ(row.bytes, device.arena_bytes);
    }
  }
  EXPECT_TRUE(arena_row);
  EXPECT_EQ(variables, device.variable_bytes);
  EXPECT_EQ(device.bytes_by_kind.at("parameter"), (784u * 512 + 512 + 512 * 10 + 10) * 4);
  EXPECT_EQ(device.bytes_by_kind.at("optimizer_state"), 2 * device.bytes_by_kind.at("parameter"));
  const nlohmann::json json = to_json(estimate);
  EXPECT_EQ(json["batch_size"], 32);
  EXPECT_EQ(json["tensors"].size(), estimate.rows.size());
  EXPECT_EQ(json["devices"][0]["planned_peak_bytes"], device.planned_peak_bytes);
  std::ostringstream table;
  print_estimate(table, estimate);
  EXPECT_NE(table.str().find("dense/kernel"), std::string::npos);
  EXPECT_EQ(shape_text({784, 512}), "[784,512]");
  EXPECT_EQ(trace_file_name("opencl:0/shared"), "trace-opencl_0_shared.csv");
}

// An out-of-memory error for the step's arena on sim:0, as the device would raise it at batch 2048.
OutOfMemoryError arena_refused(std::size_t requested) {
  OutOfMemoryReport report = OutOfMemoryReport::for_request(
      "bfc", requested, requested, {.name = "report/arena", .kind = memory::AllocationKind::step_arena}, 8 * kMiB,
      6 * kMiB, 8 * kMiB);
  report.device = "sim:0";
  return OutOfMemoryError(report);
}

TEST_F(MemoryReport, AdviceNamesTheLargestBatchThatFitsInTheCallersWords) {
  const std::int64_t batch = largest_fitting_batch(model_, devices_, 2048);
  ASSERT_GT(batch, 0);
  EXPECT_TRUE(batch_fits(model_, devices_, batch));
  EXPECT_FALSE(batch_fits(model_, devices_, batch + 1));
  EXPECT_FALSE(batch_fits(model_, devices_, 2048));

  OutOfMemoryError cli = arena_refused(20 * kMiB);
  add_oom_advice(cli, model_, devices_, 2048);
  const std::string flags = cli.report().suggestion;
  EXPECT_EQ(flags.rfind("--batch-size " + std::to_string(batch) + " fits", 0), 0u) << flags;
  EXPECT_NE(flags.find("`tensorpool estimate --batch-size " + std::to_string(batch) + "`"), std::string::npos);
  EXPECT_NE(std::string(cli.what()).find("Suggested fix: " + flags), std::string::npos);

  OutOfMemoryError python = arena_refused(20 * kMiB);
  add_oom_advice(python, model_, devices_, 2048, {},
                 {.batch_size = "batch_size={}",
                  .check_estimate = "estimate(model, {})",
                  .expandable = "EXPANDABLE",
                  .allow_growth = "GROWTH={}",
                  .bfc_allow_growth = "BFC GROWTH={}",
                  .more_sim_memory = "more memory",
                  .smaller_layers = "smaller layers",
                  .shard_optimizer = "SHARD",
                  .mirrored_shard_optimizer = "MIRRORED SHARD"});
  const std::string words = python.report().suggestion;
  EXPECT_EQ(words.rfind("batch_size=" + std::to_string(batch) + " fits", 0), 0u) << words;
  EXPECT_NE(words.find("estimate(model, " + std::to_string(batch) + ")"), std::string::npos) << words;
  EXPECT_NE(words.find("MIRRORED SHARD"), std::string::npos) << words;  // one device: shard over several
  EXPECT_EQ(words.find("--"), std::string::npos) << words;
}

class MemoryReportTooSmall : public MemoryReport {
 protected:
  MemoryReportTooSmall() : MemoryReport(2 * kMiB) {}
};

TEST_F(MemoryReportTooSmall, AdviceSaysNoBatchFitsWhenTheVariablesDoNot) {
  EXPECT_EQ(largest_fitting_batch(model_, devices_, 32), 0);
  OutOfMemoryError error = arena_refused(kMiB);
  add_oom_advice(error, model_, devices_, 32, {}, {.more_sim_memory = "MORE"});
  const std::string advice = error.report().suggestion;
  EXPECT_NE(advice.find("no batch size fits"), std::string::npos) << advice;
  EXPECT_NE(advice.find("give it more memory (MORE)"), std::string::npos) << advice;
}

TEST_F(MemoryReport, SummaryDataTextAndJsonAgreeWithThePlan) {
  const runtime::MemoryPlan plan = model_.plan(32);
  const std::vector<DeviceSummary> summary = memory_summary(manager_, {"sim:0"}, plan, model_);
  ASSERT_EQ(summary.size(), 1u);
  const DeviceSummary& device = summary.front();
  EXPECT_EQ(device.device, "sim:0");
  EXPECT_EQ(device.planned_peak_bytes, plan.devices.front().planned_peak_bytes);
  EXPECT_EQ(device.arena_bytes, plan.devices.front().arena_bytes);
  EXPECT_FALSE(device.shared.has_value()) << "sim devices have no shared memory";
  ASSERT_FALSE(device.largest_tensors.empty());
  EXPECT_LE(device.largest_tensors.size(), 6u);
  for (std::size_t index = 1; index < device.largest_tensors.size(); ++index) {
    EXPECT_GE(device.largest_tensors[index - 1].bytes, device.largest_tensors[index].bytes);
  }
  const std::string text = summary_text(summary);
  EXPECT_EQ(text.rfind("\nMemory summary\n  sim:0: peak in use ", 0), 0u) << text;
  EXPECT_NE(text.find(device.largest_tensors.front().name), std::string::npos);
  const nlohmann::json json = to_json(summary);
  ASSERT_EQ(json.size(), 1u);
  EXPECT_EQ(json[0]["device"], "sim:0");
  EXPECT_EQ(json[0]["planned_peak_bytes"], device.planned_peak_bytes);
  EXPECT_EQ(json[0]["parameter_bytes"], device.parameter_bytes);
  EXPECT_EQ(json[0]["largest_tensors"].size(), device.largest_tensors.size());
  EXPECT_FALSE(json[0].contains("shared_peak_in_use_bytes"));
}

// TP_ARENA_SHARDS reaches the devices' stacks, and the summary names the shards.
TEST(MemoryReportShards, TheSummaryNamesTheArenaShards) {
  const memory::GetEnv env = [](const char* name) -> const char* {
    return std::string_view(name) == "TP_ARENA_SHARDS" ? "2" : nullptr;
  };
  device::DeviceManager manager(runtime::testing::two_sim_devices(8 * kMiB), env);
  train::Sequential model({784}, {{.units = 512, .activation = train::Activation::relu},
                                  {.units = 10, .activation = train::Activation::softmax}});
  model.compile({}, train::Strategy::one_device("sim:0"), {.name = "report", .devices = &manager});
  EXPECT_EQ(manager.device("sim:0").memory().config().arena_shards, 2u);
  const std::vector<DeviceSummary> summary = memory_summary(manager, {"sim:0"}, model.plan(32), model);
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].allocator, "expandable (2 shards)");
  const std::string text = summary_text(summary);
  EXPECT_NE(text.find("allocator expandable (2 shards), grows on demand"), std::string::npos) << text;
}

// One state of sim:0's stack (live blocks with holes between them, requests that rounding enlarges): the
// summary after training (data, text, JSON), the profiler's table and snapshot JSON and an out-of-memory
// report all give the stack's own figures, through fragmentation.hpp.
TEST_F(MemoryReport, FragmentationReadsTheSameEverywhereForOneState) {
  device::Device& sim = manager_.device("sim:0");
  std::vector<std::shared_ptr<Buffer>> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(sim.allocate(100 * 1024 + 1));
  for (std::size_t i = 0; i < blocks.size(); i += 2) blocks[i].reset();
  const memory::Fragmentation stack = sim.memory().stats().fragmentation_detail();
  ASSERT_TRUE(stack.internal_bytes.has_value());
  EXPECT_GT(*stack.internal_bytes, 0u);
  EXPECT_LT(stack.external, 1.0);

  const std::vector<DeviceSummary> summary = memory_summary(manager_, {"sim:0"}, model_.plan(32), model_);
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].fragmentation.external, stack.external);
  EXPECT_EQ(summary[0].fragmentation.largest_free_block, stack.largest_free_block);
  EXPECT_EQ(summary[0].fragmentation.internal_bytes, stack.internal_bytes);
  const std::string text = summary_text(summary);
  EXPECT_NE(text.find("    " + memory::describe(stack) + "\n"), std::string::npos) << text;
  const nlohmann::json json = to_json(summary);
  EXPECT_EQ(json[0]["fragmentation"], stack.external);
  EXPECT_EQ(json[0]["largest_free_block"], stack.largest_free_block);
  EXPECT_EQ(json[0]["free_bytes"], stack.free_bytes);
  EXPECT_EQ(json[0]["internal_fragmentation_bytes"], *stack.internal_bytes);

  const std::string table = profile::memory_summary(sim);
  char percent[16];
  std::snprintf(percent, sizeof percent, "%.1f%%", 100.0 * stack.external);
  EXPECT_NE(table.find(percent), std::string::npos) << table;
  EXPECT_NE(table.find("internal frag."), std::string::npos) << table;
  EXPECT_NE(table.find(format_bytes(*stack.internal_bytes)), std::string::npos) << table;
  const nlohmann::json snapshot =
      nlohmann::json::parse(profile::snapshot_json(profile::memory_snapshot({&sim})))["devices"][0]["stats"];
  EXPECT_EQ(snapshot["fragmentation"], stack.external);
  EXPECT_EQ(snapshot["largest_free_block"], stack.largest_free_block);
  EXPECT_EQ(snapshot["internal_fragmentation_bytes"], *stack.internal_bytes);

  try {
    (void)sim.allocate(64 * kMiB);
    FAIL() << "64 MiB fit in an 8 MiB device";
  } catch (const OutOfMemoryError& error) {
    const memory::Fragmentation report = error.report().fragmentation();
    EXPECT_EQ(report.external, stack.external);
    EXPECT_EQ(report.largest_free_block, stack.largest_free_block);
    EXPECT_EQ(report.internal_bytes, stack.internal_bytes);
    EXPECT_NE(std::string(error.what()).find(memory::describe(stack)), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace tp::report

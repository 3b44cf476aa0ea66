// SPDX-License-Identifier: Apache-2.0
// `tensorpool replay` and `tensorpool trace generate` end to end: runs the built binary (build/bin/tensorpool,
// found next to this test's build folder, or $TP_CLI) and checks exit codes and output for good and bad input.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include "tools/support/cli_runner.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

using tp::cli::testing::cli_path;
using tp::cli::testing::CliRun;

CliRun run(const std::string& arguments) { return tp::cli::testing::run_cli(arguments); }

class ReplayCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cli_path())) GTEST_SKIP() << "tensorpool binary not built at " << cli_path();
    directory_ = fs::temp_directory_path() / ("tp_replay_cli_test_" + std::to_string(::getpid()));
    fs::create_directories(directory_);
    write("good.csv",
          "Thread,Time,Action,Pointer,Size,Stream\n"
          "0,100,allocate,0x7f0000000000,1048576,0x0\n"
          "1,200,allocate,0x7f0000100000,3145728,0x0\n"
          "0,300,free,0x7f0000000000,1048576,0x0\n"
          "1,400,allocate,0x7f0000000000,524288,0x0\n"
          "0,500,free,0x7f0000100000,3145728,0x0\n"
          "1,600,free,0x7f0000000000,524288,0x0\n");
    write("bad.csv",
          "Thread,Time,Action,Pointer,Size,Stream\n"
          "0,100,allocate,0x1000,64,0x0\n"
          "0,200,free,0x1000,65,0x0\n");
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(directory_, ignored);
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(directory_ / name) << text;
    return path(name);
  }
  std::string path(const std::string& name) const { return (directory_ / name).string(); }

  fs::path directory_;
};

int lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

TEST_F(ReplayCli, PrintsAnAlignedTableWithEveryAllocatorAndThePlanner) {
  const CliRun result = run("replay --trace " + path("good.csv") + " --allocator all --find-min-capacity");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* expected :
       {"allocator", "median ns", "p99 ns", "peak live", "peak reserved", "reserved/live", "OOMs", "min capacity",
        "bfc ", "bfc-grow", "expandable", "system", "offline plan", "4.00 MiB"}) {
    EXPECT_NE(result.output.find(expected), std::string::npos) << expected << " missing in\n" << result.output;
  }
}

TEST_F(ReplayCli, JsonUsesSnakeCaseAndIntegerBytes) {
  const CliRun result =
      run("replay --trace " + path("good.csv") + " --allocator bfc-grow --capacity 64MiB --json --repeat 2");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json json = nlohmann::json::parse(result.output);
  EXPECT_EQ(json["capacity_bytes"], 64u << 20);
  EXPECT_EQ(json["peak_live_bytes"], 4u << 20);
  EXPECT_EQ(json["repeat"], 2);
  ASSERT_EQ(json["results"].size(), 1u);
  const nlohmann::json& row = json["results"][0];
  EXPECT_EQ(row["allocator"], "bfc-grow");
  EXPECT_EQ(row["ops"], 6);
  EXPECT_EQ(row["oom_count"], 0);
  EXPECT_TRUE(row["peak_reserved_bytes"].is_number_unsigned());
  EXPECT_TRUE(row["median_ns"].is_number_unsigned());
  EXPECT_EQ(json["offline_plan"]["lower_bound_bytes"], 4u << 20);
  EXPECT_EQ(json["offline_plan"]["heap_bytes"], 4u << 20);
}

// A 3 MiB request in a preallocated 4 MiB region: TensorFlow's rule hands out the whole region (it is below
// twice the request), so the next 1 MiB request runs out of memory; the exact split serves both.
TEST_F(ReplayCli, BfcSplitExactServesWhatTensorFlowsRuleRefuses) {
  write("slack.csv",
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "0,100,allocate,0x7f0000000000,3145728,0x0\n"
        "0,200,allocate,0x7f0000300000,1048576,0x0\n"
        "0,300,free,0x7f0000000000,3145728,0x0\n"
        "0,400,free,0x7f0000300000,1048576,0x0\n");
  const std::string base = "replay --trace " + path("slack.csv") + " --allocator bfc --capacity 4MiB --json";
  for (const auto& [flags, split, ooms] : {std::tuple<std::string, std::string, int>{"", "tensorflow", 1},
                                           {" --bfc-split tensorflow", "tensorflow", 1},
                                           {" --bfc-split exact", "exact", 0}}) {
    const CliRun result = run(base + flags);
    ASSERT_EQ(result.exit_code, 0) << flags << "\n" << result.output;
    const nlohmann::json row = nlohmann::json::parse(result.output)["results"][0];
    EXPECT_EQ(row["allocator"], "bfc") << flags;
    EXPECT_EQ(row["bfc_split"], split) << flags;
    EXPECT_EQ(row["oom_count"], ooms) << flags;
  }
  // Every allocator: the bfc rows say their policy; the others have none.
  const CliRun table = run("replay --trace " + path("slack.csv") + " --allocator all --bfc-split exact");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("bfc (exact)"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("bfc-grow (exact)"), std::string::npos) << table.output;
  EXPECT_EQ(table.output.find("expandable (exact)"), std::string::npos) << table.output;
  // Asked of an allocator without a split policy, the flag is refused, naming the fix.
  const CliRun refused = run("replay --trace " + path("slack.csv") + " --allocator expandable --bfc-split exact");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--bfc-split exact applies to --allocator bfc, bfc-grow or all"), std::string::npos)
      << refused.output;
  EXPECT_EQ(lines(refused.output), 1) << refused.output;
}

// --share-granules reaches the expandable row's arena (and only it), and is refused without an expandable row.
TEST_F(ReplayCli, ShareGranulesSetsTheExpandableRowOnly) {
  const std::string base = "replay --trace " + path("good.csv");
  for (const auto& [flags, shared] : {std::pair<std::string, bool>{"", false}, {" --share-granules", true}}) {
    const CliRun result = run(base + " --allocator all --json" + flags);
    ASSERT_EQ(result.exit_code, 0) << flags << "\n" << result.output;
    for (const nlohmann::json& row : nlohmann::json::parse(result.output)["results"]) {
      if (row["allocator"] == "expandable") {
        EXPECT_EQ(row["share_granules"], shared) << flags;
      } else {
        EXPECT_FALSE(row.contains("share_granules")) << row.dump();
      }
    }
  }
  const CliRun table = run(base + " --allocator expandable --share-granules");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("expandable (shared granules)"), std::string::npos) << table.output;
  const CliRun refused = run(base + " --allocator bfc --share-granules");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--share-granules applies to --allocator expandable or all, not bfc"),
            std::string::npos)
      << refused.output;
  EXPECT_EQ(lines(refused.output), 1) << refused.output;
}

// Issue 23's target end to end: the fragmenting trace runs out of memory under bfc and expandable at 64 MiB
// and replays without an OOM at the same capacity with --compact, every block's bytes checked.
TEST_F(ReplayCli, CompactServesTheFragmentingTraceAtTheSameCapacity) {
  const CliRun generated = run("trace generate --kind fragmenting --output " + path("fragmenting.csv"));
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  const std::string base = "replay --trace " + path("fragmenting.csv") + " --capacity 64MiB --json";
  const CliRun plain = run(base + " --allocator all");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  for (const nlohmann::json& row : nlohmann::json::parse(plain.output)["results"]) {
    if (row["allocator"] == "bfc" || row["allocator"] == "expandable") {
      EXPECT_GT(row["oom_count"].get<int>(), 0) << row.dump();
      EXPECT_FALSE(row.contains("compaction")) << row.dump();
    }
  }
  const CliRun compacted = run(base + " --allocator expandable --compact");
  ASSERT_EQ(compacted.exit_code, 0) << compacted.output;
  const nlohmann::json row = nlohmann::json::parse(compacted.output)["results"][0];
  EXPECT_EQ(row["oom_count"], 0) << row.dump();
  EXPECT_EQ(row["compact"], true);
  EXPECT_GT(row["compaction"]["blocks_moved"].get<int>(), 0) << row.dump();
  EXPECT_EQ(row["compaction"]["retries_served"], row["compaction"]["compactions"]) << row.dump();
  const CliRun table =
      run("replay --trace " + path("fragmenting.csv") + " --capacity 64MiB --allocator expandable --compact");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("expandable (compact): "), std::string::npos) << table.output;
  for (const std::string flags : {" --allocator bfc", " --share-granules"}) {
    const CliRun refused = run(base + " --compact" + flags);
    EXPECT_EQ(refused.exit_code, 2) << flags << "\n" << refused.output;
    EXPECT_NE(refused.output.find("--compact"), std::string::npos) << refused.output;
  }
}

// Reclaim before growing: with --compact-before-growth the expandable row compacts before its arena grows
// (and on a refusal), every block's bytes checked; the fragmenting trace replays without an OOM at 64 MiB.
TEST_F(ReplayCli, CompactBeforeGrowthMovesBlocksBeforeTheArenaGrows) {
  const CliRun generated = run("trace generate --kind fragmenting --output " + path("fragmenting.csv"));
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  const std::string base = "replay --trace " + path("fragmenting.csv") + " --capacity 64MiB";
  const CliRun compacted = run(base + " --json --allocator expandable --compact-before-growth");
  ASSERT_EQ(compacted.exit_code, 0) << compacted.output;
  const nlohmann::json row = nlohmann::json::parse(compacted.output)["results"][0];
  EXPECT_EQ(row["oom_count"], 0) << row.dump();
  EXPECT_EQ(row["compact_before_growth"], true) << row.dump();
  EXPECT_GT(row["compaction"]["before_growth"].get<int>(), 0) << row.dump();
  EXPECT_GT(row["compaction"]["growth_requests"].get<int>(), 0) << row.dump();
  EXPECT_GT(row["compaction"]["blocks_moved"].get<int>(), 0) << row.dump();
  const CliRun table = run(base + " --allocator expandable --compact-before-growth");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("expandable (compact before growth): "), std::string::npos) << table.output;
  for (const std::string flags : {" --allocator bfc", " --share-granules"}) {
    const CliRun refused = run(base + " --compact-before-growth" + flags);
    EXPECT_EQ(refused.exit_code, 2) << flags << "\n" << refused.output;
    EXPECT_NE(refused.output.find("--compact-before-growth"), std::string::npos) << refused.output;
  }
}

TEST_F(ReplayCli, SmallCapacityReportsOomsNotAnError) {
  const CliRun result = run("replay --trace " + path("good.csv") + " --allocator system --capacity 3MiB --json");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_GT(nlohmann::json::parse(result.output)["results"][0]["oom_count"].get<int>(), 0);
}

TEST_F(ReplayCli, BadInputExitsWithCodeTwoAndOneLineNamingIt) {
  struct Case {
    std::string arguments;
    std::string mentions;
  };
  const Case cases[] = {
      {"replay --trace " + path("missing.csv"), "missing.csv"},
      {"replay --trace " + path("bad.csv"), "bad.csv:3:"},
      {"replay --trace " + path("good.csv") + " --allocator tlsf", "'tlsf'"},
      {"replay --trace " + path("good.csv") + " --capacity 12XB", "12XB"},
      {"replay --trace " + path("good.csv") + " --capacity 0", "--capacity"},
      {"replay --trace " + path("good.csv") + " --repeat zero", "--repeat"},
      {"replay", "--trace"},
      {"replay --trace " + directory_.string(), "directory"},
      {"trace generate --kind bogus --output " + path("x.csv"), "bogus"},
      {"replay --trace " + path("good.csv") + " --capacity 100", "--capacity 100"},
      {"replay --trace " + path("good.csv") + " --capacity 18446744073709551615", "--capacity"},
      {"--no-such-flag", "tensorpool --help"},
      {"replay --trace " + path("good.csv") + " --json=maybe", "--json"},
      {"replay --trace " + path("good.csv") + " --allocator managed", "--device cuda:N"},
      {"replay --trace " + path("good.csv") + " --allocator cuda_malloc_async", "--device cuda:N"},
      {"replay --trace " + path("good.csv") + " --device gpu0", "--device 'gpu0'"},
      {"replay --trace " + path("good.csv") + " --device cuda:x", "--device 'cuda:x'"},
  };
  for (const Case& c : cases) {
    const CliRun result = run(c.arguments);
    EXPECT_EQ(result.exit_code, 2) << c.arguments << "\n" << result.output;
    EXPECT_NE(result.output.find(c.mentions), std::string::npos) << c.arguments << "\n" << result.output;
    EXPECT_EQ(lines(result.output), 1) << c.arguments << "\n" << result.output;
  }
}

// On a GPU the rows carry the driver's view; without one (or without the CUDA backend) the replay refuses in
// one line naming the reason, before reading the trace, instead of crashing.
TEST_F(ReplayCli, OnACudaDeviceReportsTheDriversViewOrRefusesNamingWhy) {
  const CliRun result = run("replay --trace " + path("good.csv") + " --device cuda:0 --allocator system --json");
  if (result.exit_code != 0) {
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_NE(result.output.find("cuda:0"), std::string::npos) << result.output;
    const bool named = result.output.find("no CUDA device") != std::string::npos ||
                       result.output.find("no CUDA backend") != std::string::npos;
    EXPECT_TRUE(named) << result.output;
    EXPECT_EQ(lines(result.output), 1) << result.output;
    return;
  }
  const auto json = nlohmann::json::parse(result.output);
  EXPECT_EQ(json["device"], "cuda:0");
  const auto& row = json["results"][0];
  EXPECT_EQ(row["allocator"], "system");
  ASSERT_TRUE(row.contains("driver")) << result.output;
  EXPECT_GE(row["driver"]["used_after_bytes"].get<std::size_t>(), 0U);
}

TEST_F(ReplayCli, AnAllocationNoFreeingCouldServeExitsThreeNamingTheLine) {
  // 1000 TiB: within the simulated device's default capacity (twice the peak), beyond what the host can map.
  const std::string huge = std::to_string(1000ull << 40);
  write("huge.csv",
        "Thread,Time,Action,Pointer,Size,Stream\n"
        "0,1,allocate,0x1000,64,0x0\n"
        "0,2,allocate,0x2000," +
            huge +
            ",0x0\n"
            "0,3,free,0x2000," +
            huge + ",0x0\n");
  for (const std::string& options :
       {std::string(""), std::string(" --allocator system"), std::string(" --capacity 1GiB --allocator bfc")}) {
    const CliRun result = run("replay --trace " + path("huge.csv") + options);
    EXPECT_EQ(result.exit_code, 3) << options << "\n" << result.output;
    EXPECT_NE(result.output.find("huge.csv:3"), std::string::npos) << options << "\n" << result.output;
    EXPECT_NE(result.output.find("1000.00 TiB"), std::string::npos) << options << "\n" << result.output;
  }
  // The 3 MiB allocation on line 3 alone is larger than a 2 MiB device: no allocator can serve it.
  const CliRun small = run("replay --trace " + path("good.csv") + " --allocator expandable --capacity 2MiB");
  EXPECT_EQ(small.exit_code, 3) << small.output;
  EXPECT_NE(small.output.find("good.csv:3"), std::string::npos) << small.output;
  EXPECT_NE(small.output.find("--capacity 3.00 MiB or more"), std::string::npos) << small.output;
}

TEST_F(ReplayCli, TracesOfTensOfThousandsOfThreadsReplay) {
  // One thread per logged thread ran out of threads (EAGAIN) after a long wait; workers are now capped.
  constexpr int kThreads = 40000;
  std::string text = "Thread,Time,Action,Pointer,Size,Stream\n";
  for (int thread = 0; thread < kThreads; ++thread) {
    text += std::to_string(thread) + "," + std::to_string(2 * thread) + ",allocate,0x1000,4096,0x0\n";
    text += std::to_string(thread) + "," + std::to_string(2 * thread + 1) + ",free,0x1000,4096,0x0\n";
  }
  write("threads.csv", text);
  const CliRun result = run("replay --trace " + path("threads.csv") + " --allocator system --json");
  ASSERT_EQ(result.exit_code, 0) << result.output.substr(0, 2000);
  const nlohmann::json json = nlohmann::json::parse(result.output);
  EXPECT_EQ(json["threads"], kThreads);
  EXPECT_EQ(json["results"][0]["ops"], 2 * kThreads);
  EXPECT_EQ(json["results"][0]["oom_count"], 0);
}

TEST_F(ReplayCli, GenerateAllRefusesAFileAsItsOutput) {
  const CliRun named = run("trace generate --kind all --output " + path("f.csv"));
  EXPECT_EQ(named.exit_code, 2) << named.output;
  EXPECT_NE(named.output.find("--output '" + path("f.csv") + "' names a file"), std::string::npos) << named.output;
  EXPECT_NE(named.output.find("directory"), std::string::npos) << named.output;
  EXPECT_FALSE(fs::exists(path("f.csv"))) << "no directory named like a file";
  const std::string existing = write("existing", "keep me\n");
  const CliRun file = run("trace generate --output " + existing);  // --kind all is the default
  EXPECT_EQ(file.exit_code, 2) << file.output;
  EXPECT_NE(file.output.find("is a file"), std::string::npos) << file.output;
  EXPECT_TRUE(fs::is_regular_file(existing));
  const CliRun directory = run("trace generate --kind all --seed 2 --output " + path("traces"));
  ASSERT_EQ(directory.exit_code, 0) << directory.output;
  for (const char* kind : {"random", "training", "varying_shape", "llm_serving", "growing_batch", "fragmenting"}) {
    EXPECT_TRUE(fs::is_regular_file(directory_ / "traces" / (std::string(kind) + ".csv"))) << kind;
  }
}

TEST_F(ReplayCli, GeneratesTracesThatReplay) {
  const CliRun generated = run("trace generate --kind training --seed 3 --output " + path("training.csv"));
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  const CliRun replayed = run("replay --trace " + path("training.csv") + " --allocator expandable");
  ASSERT_EQ(replayed.exit_code, 0) << replayed.output;
  EXPECT_NE(replayed.output.find("expandable"), std::string::npos) << replayed.output;
}

}  // namespace

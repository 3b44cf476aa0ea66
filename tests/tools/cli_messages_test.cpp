// SPDX-License-Identifier: Apache-2.0
// The CLI's messages for bad option values and commands (issue 18, item 13): each is one line with exit code
// 2 that names the flag (or the word), repeats the value and says what is accepted, readably. Every case
// fails at parse time, before any work, so the whole suite takes well under a second.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/support/cli_runner.hpp"

namespace {

using tp::cli::testing::cli_path;
using tp::cli::testing::CliRun;
using tp::cli::testing::run_cli;

struct Case {
  std::string arguments;
  std::string message;  // the line must contain this
};

class CliMessages : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(cli_path())) GTEST_SKIP() << "tensorpool binary not built at " << cli_path();
  }

  static void expect_one_line_exit_two(const std::vector<Case>& cases) {
    for (const Case& c : cases) {
      const CliRun run = run_cli(c.arguments);
      EXPECT_EQ(run.exit_code, 2) << c.arguments << "\n" << run.output;
      EXPECT_NE(run.output.find(c.message), std::string::npos) << c.arguments << "\n" << run.output;
      EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << c.arguments << "\n" << run.output;
      // CLI11's own range checks printed a double's whole range: hundreds of digits.
      EXPECT_LT(run.output.size(), 300u) << c.arguments << "\n" << run.output;
      EXPECT_EQ(run.output.find("Could not convert"), std::string::npos) << c.arguments << "\n" << run.output;
    }
  }
};

TEST_F(CliMessages, AnUnknownOrMissingCommandListsTheCommands) {
  const std::string commands = "the commands are train, estimate, profile, replay, trace, devices";
  expect_one_line_exit_two({
      {"bogus", "unknown command 'bogus'; " + commands},
      {"", "a command is required; " + commands},
      {"trace bogus", "unknown command 'bogus'; the commands of 'trace' are generate"},
      {"trace", "a command is required; the commands of 'trace' are generate"},
  });
}

TEST_F(CliMessages, NumbersNameTheFlagTheValueAndTheRange) {
  expect_one_line_exit_two({
      {"train --epochs -1", "--epochs: '-1' is not a whole number >= 0"},
      {"train --steps-in-flight 0", "--steps-in-flight: '0' is not a whole number >= 1"},
      {"train --seed -1", "--seed: '-1' is not a whole number >= 0"},
      {"estimate --seed x", "--seed: 'x' is not a whole number >= 0"},
      {"estimate --intra-op-threads 5000", "--intra-op-threads: '5000' is not a whole number from 0 to 1,024"},
      {"profile --inter-op-threads -2", "--inter-op-threads: '-2' is not a whole number from 0 to 1,024"},
      {"estimate --batch-size 1.5", "--batch-size: '1.5' is not a whole number"},
      {"train --batch-size 99999999999999999999", "--batch-size: '99999999999999999999' is too large"},
      {"profile --steps ten", "--steps: 'ten' is not a whole number"},
      {"profile --max-events -3", "--max-events: '-3' is not a whole number >= 0"},
  });
}

TEST_F(CliMessages, BooleansNameTheFlagTheValueAndTrueOrFalse) {
  expect_one_line_exit_two({
      {"train --allow-growth maybe", "--allow-growth: 'maybe' is not true or false"},
      {"estimate --allow-growth 2", "--allow-growth: '2' is not true or false"},
      {"profile --allow-growth maybe", "--allow-growth true or --allow-growth false"},
      {"replay --json=maybe", "--json: 'maybe' is not true or false; write --json alone, or --json=false"},
      {"devices --json=maybe", "--json: 'maybe' is not true or false"},
      {"profile --synthetic=perhaps", "--synthetic: 'perhaps' is not true or false"},
      {"replay --find-min-capacity=x", "--find-min-capacity: 'x' is not true or false"},
  });
}

TEST_F(CliMessages, ChoicesNameTheFlagTheValueAndTheChoices) {
  expect_one_line_exit_two({
      {"estimate --strategy x", "--strategy: 'x' is not one of one, mirrored, multi_worker, parameter_server, ps"},
      {"estimate --allocator x", "--allocator: 'x' is not one of bfc, expandable, system, cuda_malloc_async, managed"},
      {"estimate --all-reduce x", "--all-reduce: 'x' is not one of auto, ring, reduce_to_one, nccl, mpi"},
      {"train --shard x", "--shard: 'x' is not one of auto, none, optimizer, gradients"},
      {"train --precision float8", "--precision: 'float8' is not one of float32, mixed_float16, mixed_bfloat16"},
      {"profile --gemm mkl", "--gemm: 'mkl' is not one of auto, openblas, onednn"},
      {"replay --allocator tlsf",
       "--allocator: 'tlsf' is not one of bfc, bfc-grow, expandable, system, cuda_malloc_async, managed, all"},
      {"estimate --bfc-split 2x", "--bfc-split: '2x' is not one of exact, tensorflow"},
      {"replay --bfc-split tf", "--bfc-split: 'tf' is not one of exact, tensorflow"},
      {"trace generate --kind x",
       "--kind: 'x' is not one of random, training, varying_shape, llm_serving, growing_batch, fragmenting, all"},
  });
}

TEST_F(CliMessages, AcceptedSpellingsStillParse) {
  // Values the checks must let through: they reach the command, which then fails on the missing trace file.
  for (const std::string arguments : {"replay --json=false --trace /nonexistent.csv",
                                      "replay --json --find-min-capacity=true --trace /nonexistent.csv"}) {
    const CliRun run = run_cli(arguments);
    EXPECT_EQ(run.exit_code, 2) << arguments << "\n" << run.output;
    EXPECT_NE(run.output.find("/nonexistent.csv"), std::string::npos) << arguments << "\n" << run.output;
  }
  const CliRun estimate =
      run_cli("estimate --allow-growth off --strategy one --devices sim:0 --seed 0 --json --intra-op-threads 1024");
  EXPECT_EQ(estimate.exit_code, 0) << estimate.output;
}

TEST_F(CliMessages, LogLevelIsRefusedUnlessItIsALevel) {
  // The library alone falls back to info on a bad TP_LOG_LEVEL; the tool refuses it before any work.
  const CliRun bad = run_cli("devices", "TP_LOG_LEVEL=loud");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("TP_LOG_LEVEL='loud' is not valid; accepted: off, error, warning, info, debug"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(std::count(bad.output.begin(), bad.output.end(), '\n'), 1) << bad.output;
  const CliRun good = run_cli("devices", "TP_LOG_LEVEL=' Error '");
  EXPECT_EQ(good.exit_code, 0) << good.output;
}

}  // namespace

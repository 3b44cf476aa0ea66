// SPDX-License-Identifier: Apache-2.0
// The logger: TP_LOG_LEVEL parsing (and its fallback), level filtering, no formatting below the level,
// the replaceable sink, the default stderr sink, and whole lines from concurrent threads.
#include "tensorpool/core/log.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "tensorpool/core/error.hpp"

namespace {

using tp::log::Level;
using tp::log::Record;

struct Line {
  Level level;
  std::string text;
};

// Each test captures lines through its own sink and runs at a level it sets; both are restored after.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_level_ = tp::log::set_level(Level::debug);
    previous_sink_ = tp::log::set_sink([this](const Record& record) {
      lines_.push_back({record.level, tp::log::format_line(record)});
    });
  }
  void TearDown() override {
    tp::log::set_sink(previous_sink_);
    tp::log::set_level(previous_level_);
  }

  std::vector<Line> lines_;  // written by the sink only, which the logger serializes

 private:
  Level previous_level_ = Level::info;
  tp::log::Sink previous_sink_;
};

// Counts how often it is formatted, to show that a disabled message formats nothing.
struct Counted {
  int* formatted;
};
std::ostream& operator<<(std::ostream& out, const Counted& counted) {
  ++*counted.formatted;
  return out << "counted";
}

TEST(LogLevel, ParsesEveryNameInAnyCase) {
  EXPECT_EQ(tp::log::parse_level("off"), Level::off);
  EXPECT_EQ(tp::log::parse_level("error"), Level::error);
  EXPECT_EQ(tp::log::parse_level(" Warning "), Level::warning);
  EXPECT_EQ(tp::log::parse_level("INFO"), Level::info);
  EXPECT_EQ(tp::log::parse_level("debug\n"), Level::debug);
  for (Level level : {Level::off, Level::error, Level::warning, Level::info, Level::debug}) {
    EXPECT_EQ(tp::log::parse_level(tp::log::to_string(level)), level);
  }
}

TEST(LogLevel, RejectsAnythingElseNamingTheVariableAndTheAcceptedValues) {
  for (const char* bad : {"", "  ", "loud", "3", "warn", "info,debug", "errors"}) {
    try {
      tp::log::parse_level(bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const tp::InvalidArgument& error) {
      const std::string what = error.what();
      EXPECT_NE(what.find("TP_LOG_LEVEL='" + std::string(bad) + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("off, error, warning, info, debug"), std::string::npos) << what;
    }
  }
}

TEST(LogLevel, UnsetVariableMeansInfo) {
  EXPECT_EQ(tp::log::parse_level_env(nullptr), Level::info);
  EXPECT_EQ(tp::log::parse_level_env("error"), Level::error);
  EXPECT_THROW(tp::log::parse_level_env("loud"), tp::InvalidArgument);
}

TEST_F(LogTest, MalformedVariableFallsBackToInfoWithOneWarning) {
  EXPECT_EQ(tp::log::level_from_env_or_default("debug"), Level::debug);
  EXPECT_TRUE(lines_.empty());
  EXPECT_EQ(tp::log::level_from_env_or_default("loud"), Level::info);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].level, Level::warning);
  EXPECT_EQ(lines_[0].text.rfind("[log] TP_LOG_LEVEL='loud' is not valid", 0), 0u) << lines_[0].text;
  EXPECT_NE(lines_[0].text.find("accepted: off, error, warning, info, debug"), std::string::npos) << lines_[0].text;
  EXPECT_NE(lines_[0].text.find("using info"), std::string::npos) << lines_[0].text;
}

TEST_F(LogTest, PrintsOnlyMessagesAtOrAboveTheLevel) {
  const auto log_each = [] {
    TP_LOG(error, "test", "e");
    TP_LOG(warning, "test", "w");
    TP_LOG(info, "test", "i");
    TP_LOG(debug, "test", "d");
  };
  const std::vector<std::pair<Level, std::size_t>> expected{
      {Level::off, 0}, {Level::error, 1}, {Level::warning, 2}, {Level::info, 3}, {Level::debug, 4}};
  for (const auto& [level, count] : expected) {
    lines_.clear();
    tp::log::set_level(level);
    EXPECT_EQ(tp::log::level(), level);
    log_each();
    ASSERT_EQ(lines_.size(), count) << "at level " << tp::log::to_string(level);
    const std::vector<std::string> texts{"[test] e", "[test] w", "[test] i", "[test] d"};
    for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(lines_[i].text, texts[i]);
  }
  EXPECT_FALSE(tp::log::enabled(Level::off)) << "off is a threshold, never a message's level";
}

TEST_F(LogTest, FormatsNothingBelowTheLevel) {
  int formatted = 0;
  tp::log::set_level(Level::warning);
  TP_LOG(info, "test", "value ", Counted{&formatted});
  TP_LOG(debug, "test", "value ", Counted{&formatted});
  EXPECT_EQ(formatted, 0);
  EXPECT_TRUE(lines_.empty());
  TP_LOG(warning, "test", "value ", Counted{&formatted}, " and ", 42);
  EXPECT_EQ(formatted, 1);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].text, "[test] value counted and 42");
}

TEST_F(LogTest, WriteAlwaysIgnoresTheLevel) {
  tp::log::set_level(Level::off);
  tp::log::write(Level::error, "test", "filtered");
  tp::log::write_always(Level::error, "memory", "fatal: aborting");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].text, "[memory] fatal: aborting");
  EXPECT_EQ(lines_[0].level, Level::error);
}

TEST_F(LogTest, SetLevelAndSetSinkReturnWhatTheyReplace) {
  EXPECT_EQ(tp::log::set_level(Level::error), Level::debug);
  EXPECT_EQ(tp::log::set_level(Level::info), Level::error);
  std::vector<std::string> other;
  tp::log::Sink mine = tp::log::set_sink([&other](const Record& record) { other.emplace_back(record.message); });
  TP_LOG(info, "test", "to the other sink");
  tp::log::set_sink(std::move(mine));
  TP_LOG(info, "test", "back to mine");
  EXPECT_EQ(other, std::vector<std::string>{"to the other sink"});
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].text, "[test] back to mine");
}

TEST_F(LogTest, DefaultSinkWritesOneLineToStderr) {
  tp::log::set_sink({});
  ::testing::internal::CaptureStderr();
  TP_LOG(warning, "data", "sample: pinned staging memory refused (", "no pages", ")");
  TP_LOG(debug, "data", "second");
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed, "[data] sample: pinned staging memory refused (no pages)\n[data] second\n");
}

TEST_F(LogTest, LinesFromConcurrentThreadsArriveWhole) {
  constexpr int kThreads = 4;
  constexpr int kLines = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kLines; ++i) TP_LOG(info, "thread", "thread ", t, " line ", i, " end");
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_EQ(lines_.size(), static_cast<std::size_t>(kThreads * kLines));
  std::vector<int> next(kThreads, 0);  // each thread's lines arrive in its order
  for (const Line& line : lines_) {
    int t = -1;
    int i = -1;
    ASSERT_EQ(std::sscanf(line.text.c_str(), "[thread] thread %d line %d end", &t, &i), 2) << line.text;
    ASSERT_TRUE(t >= 0 && t < kThreads) << line.text;
    EXPECT_EQ(i, next[t]++) << line.text;
  }
}

}  // namespace

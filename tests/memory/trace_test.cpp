// SPDX-License-Identifier: Apache-2.0
// The trace CSV: reader validation (every malformed case names file and line), writer round trip, time
// formats, and the LoggingAdaptor's output read back.
#include "tensorpool/memory/trace.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/memory/host_resource.hpp"
#include "tensorpool/memory/limiting_adaptor.hpp"
#include "tensorpool/memory/logging_adaptor.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"
#include "tensorpool/memory/trace_generators.hpp"

namespace {

using tp::memory::Trace;
using tp::memory::TraceAction;
using tp::memory::TraceEvent;

const std::string kHeader = "Thread,Time,Action,Pointer,Size,Stream\n";

Trace parse(const std::string& text, std::string_view name = "t.csv") {
  std::istringstream input(text);
  return tp::memory::read_trace(input, name);
}

struct Malformed {
  const char* label;
  std::string text;
  std::string where;     // "t.csv:N:" expected in the message
  std::string mentions;  // another substring expected in the message
};

class MalformedTrace : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedTrace, ThrowsDataErrorNamingFileAndLine) {
  const Malformed& c = GetParam();
  try {
    parse(c.text);
    FAIL() << c.label << ": no error for\n" << c.text;
  } catch (const tp::DataError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(c.where), std::string::npos) << c.label << ": " << message;
    EXPECT_NE(message.find(c.mentions), std::string::npos) << c.label << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  }
}

const std::string kAlloc = "0,1,allocate,0x1000,64,0x0\n";

INSTANTIATE_TEST_SUITE_P(
    Trace, MalformedTrace,
    ::testing::Values(
        Malformed{"empty", "", "t.csv:1:", "empty"},
        Malformed{"size above any resource", kHeader + "0,1,allocate,0x1000,72057594037927937,0x0\n",
                  "t.csv:2:", "above the largest allocation"},
        Malformed{"live bytes overflow",
                  kHeader + "0,1,allocate,0x1000,72057594037927936,0x0\n" + "0,2,allocate,0x2000,1,0x0\n",
                  "t.csv:3:", "live bytes pass"},
        Malformed{"wrong header", "Thread,Time,Action,Pointer,Size\n" + kAlloc, "t.csv:1:", "header"},
        Malformed{"header missing", kAlloc, "t.csv:1:", "header"},
        Malformed{"five columns", kHeader + kAlloc + "0,2,free,0x1000,64\n", "t.csv:3:", "5 columns"},
        Malformed{"seven columns", kHeader + "0,1,allocate,0x1000,64,0x0,extra\n", "t.csv:2:", "7 columns"},
        Malformed{"bad thread", kHeader + "x,1,allocate,0x1000,64,0x0\n", "t.csv:2:", "Thread 'x'"},
        Malformed{"negative thread", kHeader + "-1,1,allocate,0x1000,64,0x0\n", "t.csv:2:", "Thread"},
        Malformed{"bad time", kHeader + "0,soon,allocate,0x1000,64,0x0\n", "t.csv:2:", "Time 'soon'"},
        Malformed{"bad clock time", kHeader + "0,10:61:00.5,allocate,0x1000,64,0x0\n", "t.csv:2:", "Time"},
        Malformed{"negative time", kHeader + "0,-5,allocate,0x1000,64,0x0\n", "t.csv:2:", "Time"},
        Malformed{"unknown action", kHeader + "0,1,alloc,0x1000,64,0x0\n", "t.csv:2:", "Action 'alloc'"},
        Malformed{"bad pointer", kHeader + "0,1,allocate,0xZZ,64,0x0\n", "t.csv:2:", "Pointer '0xZZ'"},
        Malformed{"empty pointer", kHeader + "0,1,allocate,,64,0x0\n", "t.csv:2:", "Pointer"},
        Malformed{"bad size", kHeader + "0,1,allocate,0x1000,12a,0x0\n", "t.csv:2:", "Size '12a'"},
        Malformed{"negative size", kHeader + "0,1,allocate,0x1000,-64,0x0\n", "t.csv:2:", "Size"},
        Malformed{"zero size", kHeader + "0,1,allocate,0x1000,0,0x0\n", "t.csv:2:", "0 bytes"},
        Malformed{"bad stream", kHeader + "0,1,allocate,0x1000,64,stream\n", "t.csv:2:", "Stream"},
        Malformed{"null allocate", kHeader + "0,1,allocate,0x0,64,0x0\n", "t.csv:2:", "allocate failure"},
        Malformed{"unknown pointer", kHeader + kAlloc + "0,2,free,0x2000,64,0x0\n",
                  "t.csv:3:", "unknown pointer 0x2000"},
        Malformed{"double free", kHeader + kAlloc + "0,2,free,0x1000,64,0x0\n0,3,free,0x1000,64,0x0\n",
                  "t.csv:4:", "already freed on line 3"},
        Malformed{"size mismatch", kHeader + kAlloc + "0,2,free,0x1000,65,0x0\n",
                  "t.csv:3:", "allocated with size 64 on line 2"},
        Malformed{"live pointer reallocated", kHeader + kAlloc + "1,2,allocate,0x1000,32,0x0\n",
                  "t.csv:3:", "still live (allocated on line 2"},
        Malformed{"line numbers count blank lines", kHeader + kAlloc + "\n\n0,2,free,0x9,64,0x0\n",
                  "t.csv:5:", "unknown pointer"}),
    [](const ::testing::TestParamInfo<Malformed>& parameter) {
      std::string name;
      for (const char c : std::string(parameter.param.label))
        name.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
      return name;
    });

TEST(Trace, ReadsEveryTimeFormatAndOptionalSyntax) {
  const Trace trace = parse(kHeader +
                            "0,1520,allocate,0x7f0000000000,4096,0x0\r\n"
                            "140573312345856,1634567890.123456789,allocate,7f0000001000,100,0x7f8a38001020\n"
                            "\n"
                            "2,10:27:21.046553,deallocate,0x7f0000000000,4096,17\n"
                            "0,00:00:01,allocate failure,0x0,1048576,0x0\n");
  ASSERT_EQ(trace.size(), 4u);
  const auto& events = trace.events();
  EXPECT_EQ(events[0], (TraceEvent{0, 1520, TraceAction::allocate, 0x7f0000000000, 4096, 0}));
  EXPECT_EQ(events[1].thread, 140573312345856u);
  EXPECT_EQ(events[1].time_ns, 1634567890123456789);
  EXPECT_EQ(events[1].pointer, 0x7f0000001000u);
  EXPECT_EQ(events[1].stream, 0x7f8a38001020u);
  EXPECT_EQ(events[2].action, TraceAction::free);
  EXPECT_EQ(events[2].time_ns, (10 * 3600 + 27 * 60 + 21) * 1'000'000'000LL + 46'553'000);
  EXPECT_EQ(events[2].stream, 17u);
  EXPECT_EQ(events[3].action, TraceAction::allocate_failure);
  EXPECT_EQ(events[3].time_ns, 1'000'000'000);
  EXPECT_EQ(trace.threads(), (std::vector<std::uint64_t>{0, 140573312345856, 2}));
  EXPECT_EQ(trace.allocation_count(), 2u);
  EXPECT_EQ(trace.free_count(), 1u);
  EXPECT_EQ(trace.failure_count(), 1u);
  EXPECT_EQ(trace.partner(0), 2u);
  EXPECT_EQ(trace.partner(2), 0u);
  EXPECT_EQ(trace.partner(1), tp::memory::kNoEvent);
  EXPECT_EQ(trace.partner(3), tp::memory::kNoEvent);
  EXPECT_EQ(trace.peak_live_bytes(), 4196u);
}

TEST(Trace, AcceptsAddressReuseAfterFreeAndTracksPeakLive) {
  const Trace trace = parse(kHeader +
                            "0,1,allocate,0x1000,100,0x0\n"
                            "0,2,allocate,0x2000,200,0x0\n"
                            "0,3,free,0x1000,100,0x0\n"
                            "0,4,allocate,0x1000,50,0x0\n"
                            "0,5,free,0x1000,50,0x0\n"
                            "0,6,free,0x2000,200,0x0\n");
  EXPECT_EQ(trace.peak_live_bytes(), 300u);
  EXPECT_EQ(trace.partner(3), 4u);
  EXPECT_EQ(trace.partner(0), 2u);
}

TEST(Trace, HeaderOnlyIsAnEmptyTrace) {
  const Trace trace = parse(kHeader);
  EXPECT_TRUE(trace.empty());
  EXPECT_EQ(trace.peak_live_bytes(), 0u);
}

TEST(Trace, FormatsOneLineExactly) {
  EXPECT_EQ(tp::memory::format_trace_line(TraceEvent{3, 1520, TraceAction::allocate, 0x7f00deadbe00, 4096, 0}),
            "3,1520,allocate,0x7f00deadbe00,4096,0x0");
  EXPECT_EQ(tp::memory::format_trace_line(TraceEvent{0, 7, TraceAction::allocate_failure, 0, 1, 0x10}),
            "0,7,allocate failure,0x0,1,0x10");
}

TEST(Trace, WriterAndReaderRoundTrip) {
  tp::memory::RandomTraceOptions options;
  options.steps = 3000;
  options.threads = 3;
  options.max_bytes = 64 * tp::kKiB;
  options.max_live_bytes = tp::kMiB;
  const Trace original = tp::memory::generate_random_trace(options);
  std::ostringstream output;
  tp::memory::write_trace(output, original);
  const Trace read = parse(output.str(), "round_trip.csv");
  EXPECT_EQ(read.events(), original.events());
  EXPECT_EQ(read.peak_live_bytes(), original.peak_live_bytes());
  EXPECT_EQ(read.threads(), original.threads());
  for (std::size_t index = 0; index < read.size(); ++index) ASSERT_EQ(read.partner(index), original.partner(index));
}

TEST(Trace, FilesRoundTripAndMissingFilesAreNamed) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tp_trace_test_round_trip_" + std::to_string(::getpid()) + ".csv");
  const Trace original("memory", {TraceEvent{0, 0, TraceAction::allocate, 0x100, 8, 0},
                                  TraceEvent{0, 5, TraceAction::free, 0x100, 8, 0}});
  tp::memory::write_trace_file(path, original);
  EXPECT_EQ(tp::memory::read_trace_file(path).events(), original.events());
  std::filesystem::remove(path);
  try {
    (void)tp::memory::read_trace_file(path);
    FAIL() << "missing file accepted";
  } catch (const tp::DataError& error) {
    EXPECT_NE(std::string(error.what()).find(path.string()), std::string::npos) << error.what();
  }
}

TEST(Trace, NamesTheSourceLineOfEachEvent) {
  const Trace read = parse(kHeader +
                           "0,1,allocate,0x1000,100,0x0\n"
                           "\n"
                           "0,2,free,0x1000,100,0x0\n");
  EXPECT_EQ(read.line(0), 2u);
  EXPECT_EQ(read.line(1), 4u) << "the blank line counts";
  const Trace built("generated", {TraceEvent{0, 0, TraceAction::allocate, 0x100, 8, 0}});
  EXPECT_EQ(built.line(0), 2u);
}

TEST(Trace, ConstructedTracesReportEventLines) {
  try {
    Trace("generated", {TraceEvent{0, 0, TraceAction::free, 0x100, 8, 0}});
    FAIL() << "free of unknown pointer accepted";
  } catch (const tp::DataError& error) {
    EXPECT_NE(std::string(error.what()).find("generated:2:"), std::string::npos) << error.what();
  }
}

TEST(LoggingAdaptor, OutputParsesBackAndMatchesTheCalls) {
  tp::memory::HostResource host;
  std::ostringstream log;
  std::vector<std::pair<void*, std::size_t>> served;
  {
    tp::memory::LoggingAdaptor logging(host, log);
    void* a = logging.allocate(100);
    void* b = logging.allocate(3000, 64);
    logging.deallocate(a, 100);
    void* c = logging.allocate(7);
    served = {{a, 100}, {b, 3000}, {c, 7}};
    logging.deallocate(c, 7);
    logging.deallocate(b, 3000);
  }
  const Trace trace = parse(log.str(), "log.csv");
  ASSERT_EQ(trace.size(), 6u);
  const std::vector<TraceAction> actions{TraceAction::allocate, TraceAction::allocate, TraceAction::free,
                                         TraceAction::allocate, TraceAction::free,     TraceAction::free};
  for (std::size_t index = 0; index < actions.size(); ++index) {
    EXPECT_EQ(trace.events()[index].action, actions[index]) << index;
    EXPECT_EQ(trace.events()[index].thread, 0u);
    if (index > 0) {
      EXPECT_GE(trace.events()[index].time_ns, trace.events()[index - 1].time_ns);
    }
  }
  EXPECT_EQ(trace.events()[0].pointer, reinterpret_cast<std::uintptr_t>(served[0].first));
  EXPECT_EQ(trace.events()[1].pointer, reinterpret_cast<std::uintptr_t>(served[1].first));
  EXPECT_EQ(trace.events()[3].pointer, reinterpret_cast<std::uintptr_t>(served[2].first));
  EXPECT_EQ(trace.events()[1].size, 3000u);
  EXPECT_EQ(trace.peak_live_bytes(), 3100u);
  EXPECT_EQ(host.stats().bytes_in_use, 0u);
}

TEST(LoggingAdaptor, ManyThreadsProduceAValidTraceWithSmallThreadIds) {
  auto owned = std::make_unique<tp::memory::HostResource>();
  std::ostringstream log;
  constexpr int kThreads = 4;
  constexpr int kRounds = 300;
  {
    tp::memory::LoggingAdaptor logging(std::move(owned), log);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&logging, t] {
        std::vector<std::pair<void*, std::size_t>> mine;
        for (int round = 0; round < kRounds; ++round) {
          const std::size_t bytes = 16 + static_cast<std::size_t>((round * 7 + t) % 512);
          mine.emplace_back(logging.allocate(bytes), bytes);
          if (round % 3 == 2) {
            for (const auto& [ptr, size] : mine) logging.deallocate(ptr, size);
            mine.clear();
          }
        }
        for (const auto& [ptr, size] : mine) logging.deallocate(ptr, size);
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  const Trace trace = parse(log.str(), "threads.csv");  // valid: no free precedes its allocation's line
  EXPECT_EQ(trace.allocation_count(), static_cast<std::size_t>(kThreads * kRounds));
  EXPECT_EQ(trace.free_count(), trace.allocation_count());
  std::set<std::uint64_t> ids(trace.threads().begin(), trace.threads().end());
  EXPECT_EQ(ids, (std::set<std::uint64_t>{0, 1, 2, 3}));
}

TEST(LoggingAdaptor, LogsAllocateFailureAndRethrows) {
  tp::memory::HostResource host;
  tp::memory::LimitingAdaptor limit(host, 1000);
  std::ostringstream log;
  tp::memory::LoggingAdaptor logging(limit, log);
  void* a = logging.allocate(800);
  EXPECT_THROW((void)logging.allocate(400), tp::OutOfMemoryError);
  logging.deallocate(a, 800);
  logging.flush();
  const Trace trace = parse(log.str(), "oom.csv");
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace.events()[1].action, TraceAction::allocate_failure);
  EXPECT_EQ(trace.events()[1].size, 400u);
  EXPECT_EQ(trace.events()[1].pointer, 0u);
  EXPECT_EQ(logging.stats().num_ooms, limit.stats().num_ooms);
}

TEST(LoggingAdaptor, WritesAFileFlushedOnDestruction) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tp_logging_adaptor_test_" + std::to_string(::getpid()) + ".csv");
  {
    tp::memory::LoggingAdaptor logging(std::make_unique<tp::memory::HostResource>(), path);
    void* a = logging.allocate(64);
    logging.deallocate(a, 64);
  }
  const Trace trace = tp::memory::read_trace_file(path);
  EXPECT_EQ(trace.size(), 2u);
  std::filesystem::remove(path);
  EXPECT_THROW(tp::memory::LoggingAdaptor(std::make_unique<tp::memory::HostResource>(),
                                          std::filesystem::path("/nonexistent-dir/x/trace.csv")),
               tp::DataError);
}

}  // namespace

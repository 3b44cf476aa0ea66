// SPDX-License-Identifier: Apache-2.0
// Trace generators: deterministic per seed, scaled as the benchmark expects, and the bundled copies in
// bench/traces/data are exactly what the generators produce (regenerate with `tensorpool trace generate`).
#include "tensorpool/memory/trace_generators.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>

#include "tensorpool/core/error.hpp"

namespace {

using tp::memory::Trace;

TEST(TraceGenerators, SameSeedSameTraceOtherSeedOtherTrace) {
  tp::memory::RandomTraceOptions options;
  options.steps = 2000;
  const Trace a = tp::memory::generate_random_trace(options);
  const Trace b = tp::memory::generate_random_trace(options);
  options.seed = 2;
  const Trace c = tp::memory::generate_random_trace(options);
  EXPECT_EQ(a.events(), b.events());
  EXPECT_NE(a.events(), c.events());
}

TEST(TraceGenerators, RandomTraceFollowsRmmsPattern) {
  const Trace trace = tp::memory::generate_random_trace();
  EXPECT_GE(trace.size(), 50'000u);
  EXPECT_EQ(trace.free_count(), trace.allocation_count()) << "everything is freed at the end";
  EXPECT_LE(trace.peak_live_bytes(), 384 * tp::kMiB);
  EXPECT_GE(trace.peak_live_bytes(), 300 * tp::kMiB);
  for (const auto& event : trace.events()) {
    ASSERT_GE(event.size, tp::kKiB);
    ASSERT_LE(event.size, 4 * tp::kMiB);
  }
}

TEST(TraceGenerators, TrainingAndVaryingShapeTracesPeakAtAFewHundredMiB) {
  for (const char* kind : {"training", "varying_shape"}) {
    const Trace trace = tp::memory::generate_trace(kind);
    SCOPED_TRACE(kind);
    EXPECT_GE(trace.peak_live_bytes(), 200 * tp::kMiB);
    EXPECT_LE(trace.peak_live_bytes(), 800 * tp::kMiB);
    EXPECT_EQ(trace.threads().size(), 2u) << "main thread and data loader";
    EXPECT_GT(trace.size(), 10'000u);
  }
  EXPECT_THROW(tp::memory::generate_trace("bogus"), tp::InvalidArgument);
}

TEST(TraceGenerators, VaryingShapeChangesActivationSizesEveryStep) {
  tp::memory::VaryingShapeTraceOptions options;
  options.steps = 6;
  const Trace varying = tp::memory::generate_varying_shape_trace(options);
  tp::memory::TrainingTraceOptions fixed_options;
  fixed_options.steps = 6;
  const Trace fixed = tp::memory::generate_training_trace(fixed_options);
  auto distinct_sizes = [](const Trace& trace) {
    std::set<std::size_t> sizes;
    for (const auto& event : trace.events()) sizes.insert(event.size);
    return sizes.size();
  };
  EXPECT_GT(distinct_sizes(varying), 2 * distinct_sizes(fixed));
}

TEST(TraceGenerators, BundledTracesMatchTheGenerators) {
  const std::filesystem::path data = std::filesystem::path(__FILE__).parent_path() / "../../bench/traces/data";
  if (!std::filesystem::exists(data)) GTEST_SKIP() << "no bundled traces at " << data;
  for (const std::string& kind : tp::memory::trace_kinds()) {
    SCOPED_TRACE(kind);
    const std::filesystem::path path = data / (kind + ".csv");
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    EXPECT_LT(std::filesystem::file_size(path), 3'000'000u) << "bundled traces stay small";
    const Trace bundled = tp::memory::read_trace_file(path);
    EXPECT_EQ(bundled.events(), tp::memory::generate_trace(kind).events())
        << path << " is stale: run `tensorpool trace generate --output bench/traces/data`";
  }
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// Trace generators: deterministic per seed, scaled as the benchmark expects, and the bundled copies in
// bench/traces/data are exactly what the generators produce (regenerate with `tensorpool trace generate`).
#include "tensorpool/memory/trace_generators.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
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

// Replays the trace's bookkeeping: every free names a live allocation of the same size. Returns the
// allocations never freed, in allocation order, as event indices.
std::vector<std::size_t> check_frees_and_list_unfreed(const Trace& trace) {
  std::map<std::uintptr_t, std::size_t> live;  // pointer -> allocate event
  for (std::size_t index = 0; index < trace.size(); ++index) {
    const auto& event = trace.events()[index];
    if (event.action == tp::memory::TraceAction::allocate) {
      EXPECT_TRUE(live.emplace(event.pointer, index).second) << "event " << index;
    } else {
      const auto it = live.find(event.pointer);
      EXPECT_NE(it, live.end()) << "free of a pointer not live, event " << index;
      if (it == live.end()) continue;
      EXPECT_EQ(trace.events()[it->second].size, event.size) << "event " << index;
      live.erase(it);
    }
  }
  std::vector<std::size_t> unfreed;
  for (const auto& [pointer, index] : live) unfreed.push_back(index);
  std::sort(unfreed.begin(), unfreed.end());
  return unfreed;
}

TEST(TraceGenerators, NewKindsAreDeterministicPerSeed) {
  tp::memory::LlmServingTraceOptions serving;
  serving.requests = 6;
  tp::memory::GrowingBatchTraceOptions growing;
  growing.steps = 4;
  growing.steps_per_doubling = 1;
  const Trace serving_a = tp::memory::generate_llm_serving_trace(serving);
  const Trace growing_a = tp::memory::generate_growing_batch_trace(growing);
  EXPECT_EQ(serving_a.events(), tp::memory::generate_llm_serving_trace(serving).events());
  EXPECT_EQ(growing_a.events(), tp::memory::generate_growing_batch_trace(growing).events());
  serving.seed = 2;
  growing.seed = 2;
  EXPECT_NE(serving_a.events(), tp::memory::generate_llm_serving_trace(serving).events()) << "lengths differ";
  const Trace growing_b = tp::memory::generate_growing_batch_trace(growing);
  EXPECT_NE(growing_a.events(), growing_b.events()) << "times differ";
  auto sizes = [](const Trace& trace) {
    std::vector<std::size_t> out;
    for (const auto& event : trace.events()) out.push_back(event.size);
    return out;
  };
  EXPECT_EQ(sizes(growing_a), sizes(growing_b)) << "the schedule, not the seed, sets the shapes";
}

TEST(TraceGenerators, LlmServingKeepsOnlyTheWeightsAndBoundsItsCaches) {
  tp::memory::LlmServingTraceOptions options;
  const tp::memory::ModelOptions& model = options.model;
  const Trace trace = tp::memory::generate_llm_serving_trace(options);
  EXPECT_EQ(trace.threads(), (std::vector<std::uint64_t>{0, 1}));
  const std::vector<std::size_t> unfreed = check_frees_and_list_unfreed(trace);
  // The weights: 2 embeddings, 12 tensors per layer, final norm (2) and head, allocated first, never freed.
  const std::size_t weights = 2 + 12 * model.layers + 3;
  ASSERT_EQ(unfreed.size(), weights);
  std::size_t weight_bytes = 0;
  for (std::size_t index = 0; index < weights; ++index) {
    EXPECT_EQ(unfreed[index], index);
    weight_bytes += trace.events()[index].size;
  }
  const std::size_t token_bytes = 2 * model.layers * model.hidden * 4;
  const std::size_t largest_cache =
      (options.max_prompt + options.max_generated + options.kv_block_tokens) * token_bytes;
  const std::size_t prefill_scores = model.heads * options.max_prompt * options.max_prompt * 4;
  const std::size_t logits = options.max_concurrent * model.vocabulary * 4;
  std::size_t largest_dynamic = 0;
  std::size_t caches = 0;
  for (std::size_t index = weights; index < trace.size(); ++index) {
    const auto& event = trace.events()[index];
    ASSERT_LE(event.size, std::max({largest_cache, prefill_scores, logits})) << "event " << index;
    largest_dynamic = std::max(largest_dynamic, event.size);
    if (event.action == tp::memory::TraceAction::allocate &&
        event.size % (options.kv_block_tokens * token_bytes) == 0) {
      ++caches;
    }
  }
  EXPECT_GE(caches, options.requests) << "a cache per request, plus the grown ones";
  // At most max_concurrent caches and prompts are live, plus one prefill's or one decode step's activations.
  const std::size_t bound =
      weight_bytes + options.max_concurrent * (largest_cache + options.max_prompt * 8) + 8 * largest_dynamic;
  EXPECT_LE(trace.peak_live_bytes(), bound);
  EXPECT_GE(trace.peak_live_bytes(), weight_bytes + 2 * largest_cache) << "requests overlap";
}

TEST(TraceGenerators, LlmServingLengthsAndThreadsFollowTheOptions) {
  tp::memory::LlmServingTraceOptions options;
  options.requests = 5;
  options.max_concurrent = 1;
  options.threads = 1;
  options.min_prompt = options.max_prompt = 40;
  options.min_generated = options.max_generated = 70;
  options.kv_block_tokens = 16;
  const Trace trace = tp::memory::generate_llm_serving_trace(options);
  EXPECT_EQ(trace.threads(), (std::vector<std::uint64_t>{0}));
  const std::size_t token_bytes = 2 * options.model.layers * options.model.hidden * 4;
  // A 40-token prompt starts in 48 tokens of cache, which grows by 16 at 48, 64, 80, 96 tokens of the 110.
  const std::size_t weights = check_frees_and_list_unfreed(trace).size();
  std::vector<std::size_t> caches;
  for (std::size_t index = weights; index < trace.size(); ++index) {
    const auto& event = trace.events()[index];
    if (event.action == tp::memory::TraceAction::allocate && event.size % (16 * token_bytes) == 0) {
      caches.push_back(event.size / token_bytes);
    }
  }
  std::vector<std::size_t> expected;
  for (int request = 0; request < 5; ++request) expected.insert(expected.end(), {48, 64, 80, 96, 112});
  EXPECT_EQ(caches, expected);
  options.max_generated = options.model.max_sequence;
  EXPECT_THROW((void)tp::memory::generate_llm_serving_trace(options), tp::InvalidArgument);
  options.max_generated = 70;
  options.threads = 0;
  EXPECT_THROW((void)tp::memory::generate_llm_serving_trace(options), tp::InvalidArgument);
}

TEST(TraceGenerators, GrowingBatchDoublesTheBatchOnSchedule) {
  tp::memory::GrowingBatchTraceOptions options;
  EXPECT_EQ(tp::memory::growing_batch_at(options, 0), 1u);
  EXPECT_EQ(tp::memory::growing_batch_at(options, 9), 1u);
  EXPECT_EQ(tp::memory::growing_batch_at(options, 10), 2u);
  EXPECT_EQ(tp::memory::growing_batch_at(options, 35), 8u);
  EXPECT_EQ(tp::memory::growing_batch_at(options, 1'000'000), 8u) << "capped at max_batch";
  const Trace trace = tp::memory::generate_growing_batch_trace(options);
  EXPECT_EQ(trace.threads().size(), 2u) << "main thread and data loader";
  check_frees_and_list_unfreed(trace);
  // The loader's batches (ids and labels, 8 bytes per token) grow 1, 2, 4, 8 and never shrink.
  std::vector<std::size_t> loaded;
  for (const auto& event : trace.events()) {
    if (event.thread == 1 && event.action == tp::memory::TraceAction::allocate) {
      loaded.push_back(event.size / (options.sequence * 8));
    }
  }
  EXPECT_TRUE(std::is_sorted(loaded.begin(), loaded.end()));
  EXPECT_EQ(std::set<std::size_t>(loaded.begin(), loaded.end()), (std::set<std::size_t>{1, 2, 4, 8}));
  // Its peak is that of training at the final batch: the first steps' activations are an eighth of it.
  tp::memory::TrainingTraceOptions fixed;
  fixed.steps = 3;
  fixed.batch = options.max_batch;
  fixed.sequence = options.sequence;
  EXPECT_EQ(trace.peak_live_bytes(), tp::memory::generate_training_trace(fixed).peak_live_bytes());
  options.initial_batch = 16;
  EXPECT_THROW((void)tp::memory::generate_growing_batch_trace(options), tp::InvalidArgument);
  options.initial_batch = 1;
  options.steps_per_doubling = 0;
  EXPECT_THROW((void)tp::memory::generate_growing_batch_trace(options), tp::InvalidArgument);
}

TEST(TraceGenerators, UnknownKindListsEveryKind) {
  try {
    (void)tp::memory::generate_trace("lstm");
    FAIL() << "no throw";
  } catch (const tp::InvalidArgument& error) {
    for (const std::string& kind : tp::memory::trace_kinds()) {
      EXPECT_NE(std::string(error.what()).find(kind), std::string::npos) << kind << ": " << error.what();
    }
  }
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

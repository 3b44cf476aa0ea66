// SPDX-License-Identifier: Apache-2.0
// MemoryConfig validation, budget resolution and environment overrides (through an injected getenv).

#include "tensorpool/memory/memory_config.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "tensorpool/core/error.hpp"

namespace {

using tp::memory::AllocatorKind;
using tp::memory::BfcSplit;
using tp::memory::GrowthPolicy;
using tp::memory::MemoryConfig;

// A fake environment: only the variables in `values` are set.
struct FakeEnv {
  std::map<std::string, std::string> values;
  tp::memory::GetEnv getter() const {
    return [this](const char* name) -> const char* {
      auto found = values.find(name);
      return found == values.end() ? nullptr : found->second.c_str();
    };
  }
};

// Expects `action` to throw tp::InvalidArgument whose message contains every one of `parts`.
template <typename Action>
void expect_invalid(Action&& action, std::initializer_list<std::string> parts) {
  try {
    action();
    ADD_FAILURE() << "no tp::InvalidArgument thrown";
  } catch (const tp::InvalidArgument& error) {
    const std::string text = error.what();
    for (const std::string& part : parts) EXPECT_NE(text.find(part), std::string::npos) << part << " in: " << text;
  }
}

TEST(MemoryConfig, DefaultsAreValidAndFollowTensorFlow) {
  const MemoryConfig config;
  EXPECT_NO_THROW(config.validate());
  EXPECT_EQ(config.device, "host");
  EXPECT_EQ(config.policy, GrowthPolicy::preallocate);
  EXPECT_EQ(config.allocator, AllocatorKind::bfc);
  EXPECT_TRUE(config.garbage_collection);
  EXPECT_EQ(config.bfc_split, BfcSplit::tensorflow);  // bfc stays TensorFlow's twin unless asked
  EXPECT_TRUE(config.tracking);
  EXPECT_FALSE(config.fraction.has_value());
  EXPECT_FALSE(config.limit_bytes.has_value());
  EXPECT_EQ(MemoryConfig::kDefaultSplitThreshold, 128 * tp::kMiB);
  EXPECT_EQ(tp::memory::to_string(AllocatorKind::expandable), "expandable");
}

TEST(MemoryConfig, ValidateNamesTheFieldAndTheFix) {
  MemoryConfig config;
  config.fraction = 0.5;
  config.limit_bytes = tp::kGiB;
  expect_invalid([&] { config.validate(); }, {"fraction", "limit_bytes", "only one"});

  for (double bad : {0.0, -0.5, 1.5, std::nan(""), std::numeric_limits<double>::infinity()}) {
    MemoryConfig fraction_config;
    fraction_config.fraction = bad;
    expect_invalid([&] { fraction_config.validate(); }, {"fraction", "(0, 1]"});
  }
  MemoryConfig one;
  one.fraction = 1.0;
  EXPECT_NO_THROW(one.validate());

  MemoryConfig zero_limit;
  zero_limit.limit_bytes = 0;
  expect_invalid([&] { zero_limit.validate(); }, {"limit_bytes = 0"});

  MemoryConfig nameless;
  nameless.device.clear();
  expect_invalid([&] { nameless.validate(); }, {"device"});

  MemoryConfig split;
  split.split_threshold = 0;
  expect_invalid([&] { split.validate(); }, {"split_threshold"});
  MemoryConfig fraction_too_big;
  fraction_too_big.split_fraction = 1.5;
  expect_invalid([&] { fraction_too_big.validate(); }, {"split_fraction", "1.5"});
  MemoryConfig both_split;
  both_split.split_fraction = 0.1;
  both_split.split_threshold = tp::kMiB;
  expect_invalid([&] { both_split.validate(); }, {"split_threshold", "split_fraction"});

  MemoryConfig bad_enum;
  bad_enum.allocator = static_cast<AllocatorKind>(42);
  expect_invalid([&] { bad_enum.validate(); }, {"allocator"});
  MemoryConfig bad_policy;
  bad_policy.policy = static_cast<GrowthPolicy>(7);
  expect_invalid([&] { bad_policy.validate(); }, {"policy"});
  MemoryConfig bad_split;
  bad_split.bfc_split = static_cast<BfcSplit>(9);
  expect_invalid([&] { bad_split.validate(); }, {"bfc_split", "BfcSplit::exact"});
  for (std::size_t shards : {std::size_t{0}, MemoryConfig::kMaxArenaShards + 1}) {
    MemoryConfig bad_shards;
    bad_shards.arena_shards = shards;
    expect_invalid([&] { bad_shards.validate(); }, {"arena_shards = " + std::to_string(shards), "[1, 64]"});
  }
  MemoryConfig exact_split;
  exact_split.bfc_split = BfcSplit::exact;
  EXPECT_NO_THROW(exact_split.validate());
}

TEST(MemoryConfig, ResolvesTheBudget) {
  MemoryConfig config;
  EXPECT_EQ(tp::memory::resolve_limit_bytes(config, tp::kGiB), tp::kGiB) << "whole capacity by default";
  config.fraction = 0.25;
  EXPECT_EQ(tp::memory::resolve_limit_bytes(config, tp::kGiB), tp::kGiB / 4);
  expect_invalid([&] { (void)tp::memory::resolve_limit_bytes(config, std::nullopt); }, {"capacity", "limit_bytes"});
  config.fraction.reset();
  config.limit_bytes = 100 * tp::kMiB;
  EXPECT_EQ(tp::memory::resolve_limit_bytes(config, std::nullopt), 100 * tp::kMiB);
  EXPECT_EQ(tp::memory::resolve_limit_bytes(config, tp::kGiB), 100 * tp::kMiB);
  expect_invalid([&] { (void)tp::memory::resolve_limit_bytes(config, 10 * tp::kMiB); }, {"limit_bytes", "capacity"});
  config.limit_bytes = 100;
  expect_invalid([&] { (void)tp::memory::resolve_limit_bytes(config, std::nullopt); }, {"minimum"});
}

TEST(EnvOverrides, UnsetVariablesChangeNothing) {
  MemoryConfig config;
  config.limit_bytes = tp::kGiB;
  config.allocator = AllocatorKind::system;
  const FakeEnv env;
  const MemoryConfig result = tp::memory::apply_env_overrides(config, env.getter());
  EXPECT_EQ(result.policy, GrowthPolicy::preallocate);
  EXPECT_EQ(result.allocator, AllocatorKind::system);
  EXPECT_EQ(result.limit_bytes, tp::kGiB);
  EXPECT_FALSE(result.fraction.has_value());
}

TEST(EnvOverrides, AllowGrowthAcceptsEveryDocumentedSpelling) {
  const std::map<std::string, GrowthPolicy> cases = {
      {"true", GrowthPolicy::grow},         {"TRUE", GrowthPolicy::grow},     {"1", GrowthPolicy::grow},
      {"yes", GrowthPolicy::grow},          {" Yes ", GrowthPolicy::grow},    {"false", GrowthPolicy::preallocate},
      {"False", GrowthPolicy::preallocate}, {"0", GrowthPolicy::preallocate}, {"no", GrowthPolicy::preallocate},
  };
  for (const auto& [value, expected] : cases) {
    FakeEnv env{{{"TP_ALLOW_GROWTH", value}}};
    MemoryConfig start;
    start.policy = expected == GrowthPolicy::grow ? GrowthPolicy::preallocate : GrowthPolicy::grow;
    EXPECT_EQ(tp::memory::apply_env_overrides(start, env.getter()).policy, expected) << value;
  }
}

TEST(EnvOverrides, AllocatorAndFraction) {
  FakeEnv env{{{"TP_ALLOCATOR", "expandable"}, {"TP_MEMORY_FRACTION", "0.75"}}};
  MemoryConfig config;
  config.limit_bytes = tp::kGiB;  // the operator's fraction replaces the budget set in code
  const MemoryConfig result = tp::memory::apply_env_overrides(config, env.getter());
  EXPECT_EQ(result.allocator, AllocatorKind::expandable);
  EXPECT_EQ(result.fraction, 0.75);
  EXPECT_FALSE(result.limit_bytes.has_value());
  EXPECT_NO_THROW(result.validate());

  for (const auto& [text, kind] : std::map<std::string, AllocatorKind>{{"bfc", AllocatorKind::bfc},
                                                                       {"SYSTEM", AllocatorKind::system},
                                                                       {" expandable", AllocatorKind::expandable}}) {
    FakeEnv one{{{"TP_ALLOCATOR", text}}};
    EXPECT_EQ(tp::memory::apply_env_overrides(MemoryConfig{}, one.getter()).allocator, kind) << text;
  }
  for (const auto& [text, value] :
       std::map<std::string, double>{{"1", 1.0}, {"1.0", 1.0}, {".5", 0.5}, {"0.001", 0.001}}) {
    FakeEnv one{{{"TP_MEMORY_FRACTION", text}}};
    EXPECT_DOUBLE_EQ(*tp::memory::apply_env_overrides(MemoryConfig{}, one.getter()).fraction, value) << text;
  }
}

TEST(EnvOverrides, BfcSplit) {
  for (const auto& [text, split] : std::map<std::string, BfcSplit>{{"exact", BfcSplit::exact},
                                                                   {" EXACT ", BfcSplit::exact},
                                                                   {"tensorflow", BfcSplit::tensorflow},
                                                                   {"TensorFlow", BfcSplit::tensorflow}}) {
    FakeEnv env{{{"TP_BFC_SPLIT", text}}};
    MemoryConfig start;
    start.bfc_split = split == BfcSplit::exact ? BfcSplit::tensorflow : BfcSplit::exact;
    EXPECT_EQ(tp::memory::apply_env_overrides(start, env.getter()).bfc_split, split) << text;
  }
  MemoryConfig exact_in_code;
  exact_in_code.bfc_split = BfcSplit::exact;
  EXPECT_EQ(tp::memory::apply_env_overrides(exact_in_code, FakeEnv{}.getter()).bfc_split, BfcSplit::exact);
}

TEST(EnvOverrides, ArenaShards) {
  for (const auto& [text, shards] : std::map<std::string, std::size_t>{{"2", 2}, {" 4 ", 4}, {"1", 1}, {"64", 64}}) {
    FakeEnv env{{{"TP_ARENA_SHARDS", text}}};
    EXPECT_EQ(tp::memory::apply_env_overrides(MemoryConfig{}, env.getter()).arena_shards, shards) << text;
  }
  MemoryConfig in_code;
  in_code.arena_shards = 3;
  EXPECT_EQ(tp::memory::apply_env_overrides(in_code, FakeEnv{}.getter()).arena_shards, 3u);
  for (const char* bad : {"", " ", "0", "65", "-1", "two", "2.5", "2 2", "0x2"}) {
    FakeEnv env{{{"TP_ARENA_SHARDS", bad}}};
    expect_invalid([&] { (void)tp::memory::apply_env_overrides(MemoryConfig{}, env.getter()); },
                   {"TP_ARENA_SHARDS", std::string("'") + bad + "'", "1 to 64"});
  }
}

TEST(EnvOverrides, BadValuesNameTheVariableTheValueAndTheAcceptedValues) {
  for (const char* bad : {"", "  ", "maybe", "2", "-1", "truee", "on", "t"}) {
    FakeEnv env{{{"TP_ALLOW_GROWTH", bad}}};
    expect_invalid([&] { (void)tp::memory::apply_env_overrides(MemoryConfig{}, env.getter()); },
                   {"TP_ALLOW_GROWTH", std::string("'") + bad + "'", "true, false, 1, 0, yes, no"});
  }
  for (const char* bad : {"", "cuda", "bfc2", "b fc", "default"}) {
    FakeEnv env{{{"TP_ALLOCATOR", bad}}};
    expect_invalid([&] { (void)tp::memory::apply_env_overrides(MemoryConfig{}, env.getter()); },
                   {"TP_ALLOCATOR", std::string("'") + bad + "'", "bfc, expandable, system, cuda_malloc_async"});
  }
  for (const char* bad : {"", " ", "tf", "exactly", "none", "2x"}) {
    FakeEnv env{{{"TP_BFC_SPLIT", bad}}};
    expect_invalid([&] { (void)tp::memory::apply_env_overrides(MemoryConfig{}, env.getter()); },
                   {"TP_BFC_SPLIT", std::string("'") + bad + "'", "tensorflow, exact"});
  }
  for (const char* bad : {"", "0", "0.0", "-0.5", "1.01", "2", "nan", "inf", "abc", "0.5x", "50%", "+0.5", "0x1p-1",
                          "1e400", "0.5 0.5"}) {
    FakeEnv env{{{"TP_MEMORY_FRACTION", bad}}};
    expect_invalid([&] { (void)tp::memory::apply_env_overrides(MemoryConfig{}, env.getter()); },
                   {"TP_MEMORY_FRACTION", std::string("'") + bad + "'", "(0, 1]"});
  }
}

TEST(EnvOverrides, ReadsTheProcessEnvironmentByDefault) {
  ::setenv("TP_ALLOCATOR", "system", 1);
  const MemoryConfig result = tp::memory::apply_env_overrides(MemoryConfig{});
  ::unsetenv("TP_ALLOCATOR");
  EXPECT_EQ(result.allocator, AllocatorKind::system);
}

TEST(MemoryConfig, HugeCapacitiesClampInsteadOfOverflowing) {
  const std::size_t huge = std::numeric_limits<std::size_t>::max();
  MemoryConfig config;
  EXPECT_EQ(tp::memory::resolve_limit_bytes(config, huge), tp::memory::kMaxAllocationBytes);
  config.fraction = 1.0;  // capacity x 1.0 rounds to 2^64 in double: must not reach the conversion
  EXPECT_EQ(tp::memory::resolve_limit_bytes(config, huge), tp::memory::kMaxAllocationBytes);
  config.fraction = 0.5;
  EXPECT_EQ(tp::memory::resolve_limit_bytes(config, huge), tp::memory::kMaxAllocationBytes);
}

}  // namespace

// The CUDA-only allocators: accepted by name on cuda:N devices, refused on every other device with the device
// and the values it accepts; a fraction above 1 only with managed memory (oversubscription).
TEST(MemoryConfig, CudaOnlyAllocatorsAreRefusedOffCudaDevices) {
  EXPECT_EQ(tp::memory::to_string(AllocatorKind::cuda_malloc_async), "cuda_malloc_async");
  EXPECT_EQ(tp::memory::to_string(AllocatorKind::managed), "managed");
  EXPECT_TRUE(tp::memory::is_cuda_device_name("cuda:0"));
  EXPECT_TRUE(tp::memory::is_cuda_device_name("cuda:12"));
  EXPECT_FALSE(tp::memory::is_cuda_device_name("sim:0"));
  EXPECT_FALSE(tp::memory::is_cuda_device_name("cpu:0"));
  EXPECT_FALSE(tp::memory::is_cuda_device_name("opencl:0"));
  for (const AllocatorKind kind : {AllocatorKind::cuda_malloc_async, AllocatorKind::managed}) {
    for (const char* device : {"host", "sim:0", "cpu:0", "opencl:1"}) {
      MemoryConfig config;
      config.device = device;
      config.allocator = kind;
      expect_invalid([&] { config.validate(); },
                     {device, std::string(tp::memory::to_string(kind)), "cuda:N", "bfc, expandable or system"});
    }
    MemoryConfig on_cuda;
    on_cuda.device = "cuda:1";
    on_cuda.allocator = kind;
    EXPECT_NO_THROW(on_cuda.validate()) << tp::memory::to_string(kind);
  }
}

TEST(MemoryConfig, AFractionAboveOneOversubscribesOnlyManagedMemory) {
  MemoryConfig config;
  config.device = "cuda:0";
  config.fraction = 1.5;
  for (const AllocatorKind kind :
       {AllocatorKind::bfc, AllocatorKind::expandable, AllocatorKind::system, AllocatorKind::cuda_malloc_async}) {
    config.allocator = kind;
    expect_invalid([&] { config.validate(); }, {"fraction = 1.5", "managed", "(0, 1]"});
  }
  config.allocator = AllocatorKind::managed;
  EXPECT_NO_THROW(config.validate());
  EXPECT_EQ(tp::memory::resolve_limit_bytes(config, tp::kGiB), tp::kGiB + tp::kGiB / 2);
  config.fraction = MemoryConfig::kMaxOversubscription + 1;
  expect_invalid([&] { config.validate(); }, {"fraction"});
}

TEST(EnvOverrides, CudaAllocatorsAndOversubscription) {
  for (const auto& [text, kind] :
       std::map<std::string, AllocatorKind>{{"cuda_malloc_async", AllocatorKind::cuda_malloc_async},
                                            {" CUDA_MALLOC_ASYNC ", AllocatorKind::cuda_malloc_async},
                                            {"managed", AllocatorKind::managed},
                                            {"Managed", AllocatorKind::managed}}) {
    FakeEnv env{{{"TP_ALLOCATOR", text}}};
    MemoryConfig config;
    config.device = "cuda:0";
    const MemoryConfig result = tp::memory::apply_env_overrides(config, env.getter());
    EXPECT_EQ(result.allocator, kind) << text;
    EXPECT_NO_THROW(result.validate());
    MemoryConfig sim;
    sim.device = "sim:0";
    // Parsed, then refused by the stack's validation, naming the device.
    expect_invalid([&] { tp::memory::apply_env_overrides(sim, env.getter()).validate(); }, {"sim:0", "cuda:N"});
  }
  FakeEnv oversubscribed{{{"TP_ALLOCATOR", "managed"}, {"TP_MEMORY_FRACTION", "1.5"}}};
  MemoryConfig cuda;
  cuda.device = "cuda:0";
  EXPECT_DOUBLE_EQ(*tp::memory::apply_env_overrides(cuda, oversubscribed.getter()).fraction, 1.5);
  FakeEnv not_managed{{{"TP_ALLOCATOR", "cuda_malloc_async"}, {"TP_MEMORY_FRACTION", "1.5"}}};
  expect_invalid([&] { (void)tp::memory::apply_env_overrides(cuda, not_managed.getter()); },
                 {"TP_MEMORY_FRACTION", "'1.5'", "(0, 1]", "TP_ALLOCATOR=managed"});
  FakeEnv too_much{{{"TP_ALLOCATOR", "managed"}, {"TP_MEMORY_FRACTION", "17"}}};
  expect_invalid([&] { (void)tp::memory::apply_env_overrides(cuda, too_much.getter()); },
                 {"TP_MEMORY_FRACTION", "(0, 16]"});
}

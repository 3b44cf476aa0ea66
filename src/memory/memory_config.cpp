// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/memory_config.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include "tensorpool/core/error.hpp"

namespace tp::memory {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())) != 0) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) text.remove_suffix(1);
  return text;
}

std::string lower(std::string_view text) {
  std::string result(text);
  std::transform(result.begin(), result.end(), result.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return result;
}

[[noreturn]] void bad_variable(const char* variable, const char* value, std::string_view accepted) {
  TP_THROW(InvalidArgument, "memory", variable, "='", value, "' is not valid; accepted values: ", accepted,
           " (unset the variable to keep the configured value)");
}

GrowthPolicy parse_allow_growth(const char* value) {
  const std::string word = lower(trim(value));
  if (word == "true" || word == "1" || word == "yes") return GrowthPolicy::grow;
  if (word == "false" || word == "0" || word == "no") return GrowthPolicy::preallocate;
  bad_variable("TP_ALLOW_GROWTH", value, "true, false, 1, 0, yes, no");
}

AllocatorKind parse_allocator(const char* value) {
  const std::string word = lower(trim(value));
  for (AllocatorKind kind : {AllocatorKind::bfc, AllocatorKind::expandable, AllocatorKind::system,
                             AllocatorKind::cuda_malloc_async, AllocatorKind::managed}) {
    if (word == to_string(kind)) return kind;
  }
  bad_variable("TP_ALLOCATOR", value, "bfc, expandable, system, cuda_malloc_async (cuda), managed (cuda)");
}

BfcSplit parse_bfc_split(const char* value) {
  const std::string word = lower(trim(value));
  for (BfcSplit split : {BfcSplit::tensorflow, BfcSplit::exact}) {
    if (word == to_string(split)) return split;
  }
  bad_variable("TP_BFC_SPLIT", value, "tensorflow, exact");
}

std::size_t parse_thread_cache(const char* value) {
  const std::string word = lower(trim(value));
  if (word == "off" || word == "false" || word == "no") return 0;
  if (word == "on" || word == "true" || word == "yes") return MemoryConfig::kDefaultThreadCacheBytes;
  try {
    return parse_bytes(word, "TP_THREAD_CACHE");
  } catch (const InvalidArgument&) {
    bad_variable("TP_THREAD_CACHE", value, "a size such as 4MiB or 0, or on, off, true, false, yes, no");
  }
}

std::size_t parse_arena_shards(const char* value) {
  const std::string_view text = trim(value);
  std::size_t shards = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), shards);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size() || shards == 0 ||
      shards > MemoryConfig::kMaxArenaShards) {
    bad_variable("TP_ARENA_SHARDS", value, "a whole number from 1 to 64");
  }
  return shards;
}

// Above 1 only for managed memory (oversubscription); `allocator` is the one TP_ALLOCATOR left.
double parse_fraction(const char* value, AllocatorKind allocator) {
  const std::string_view text = trim(value);
  double fraction = 0.0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), fraction);
  const bool parsed = !text.empty() && error == std::errc{} && end == text.data() + text.size();
  const double most = allocator == AllocatorKind::managed ? MemoryConfig::kMaxOversubscription : 1.0;
  if (!parsed || !std::isfinite(fraction) || fraction <= 0.0 || fraction > most) {
    bad_variable("TP_MEMORY_FRACTION", value,
                 allocator == AllocatorKind::managed
                     ? "a decimal number in (0, 16] with TP_ALLOCATOR=managed, e.g. 1.5 to oversubscribe"
                     : "a decimal number in (0, 1], e.g. 0.5 (above 1 only with TP_ALLOCATOR=managed on a cuda"
                       " device)");
  }
  return fraction;
}

}  // namespace

std::string_view to_string(AllocatorKind kind) noexcept {
  switch (kind) {
    case AllocatorKind::bfc: return "bfc";
    case AllocatorKind::expandable: return "expandable";
    case AllocatorKind::system: return "system";
    case AllocatorKind::cuda_malloc_async: return "cuda_malloc_async";
    case AllocatorKind::managed: return "managed";
  }
  return "unknown";
}

bool is_cuda_device_name(std::string_view device) noexcept { return device.starts_with("cuda:"); }

void MemoryConfig::validate() const {
  if (device.empty()) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig::device is empty; name the device, e.g. \"host\" or \"sim:0\"");
  }
  if (fraction.has_value() && limit_bytes.has_value()) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device, ": both fraction (", *fraction,
             ") and limit_bytes (", *limit_bytes, ") are set; set only one of them");
  }
  if (fraction.has_value() && (!std::isfinite(*fraction) || *fraction <= 0.0 || *fraction > kMaxOversubscription)) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device, ": fraction = ", *fraction,
             " is outside (0, 1]; use e.g. 0.9 for 90% of the device's capacity");
  }
  if (fraction.has_value() && *fraction > 1.0 && allocator != AllocatorKind::managed) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device, ": fraction = ", *fraction,
             " is above 1, which only managed (unified) memory can serve by oversubscribing a cuda device; use a"
             " fraction in (0, 1], or allocator = managed on a cuda:N device");
  }
  if (limit_bytes.has_value() && (*limit_bytes == 0 || *limit_bytes > kMaxAllocationBytes)) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device, ": limit_bytes = ", *limit_bytes,
             " is outside [1, ", kMaxAllocationBytes, "]; give the budget in bytes, e.g. 8 GiB = ", 8 * kGiB);
  }
  if (policy != GrowthPolicy::preallocate && policy != GrowthPolicy::grow) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device, ": policy = ", static_cast<int>(policy),
             " is not a GrowthPolicy; use GrowthPolicy::preallocate or GrowthPolicy::grow");
  }
  if (allocator != AllocatorKind::bfc && allocator != AllocatorKind::expandable && allocator != AllocatorKind::system &&
      !is_cuda_only(allocator)) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device, ": allocator = ", static_cast<int>(allocator),
             " is not an AllocatorKind; use bfc, expandable, system, cuda_malloc_async or managed");
  }
  if (is_cuda_only(allocator) && !is_cuda_device_name(device)) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device, ": allocator = ", to_string(allocator),
             " is served only by cuda:N devices (CUDA's ",
             allocator == AllocatorKind::managed ? "cudaMallocManaged" : "cudaMallocAsync pool", "); on ", device,
             " use allocator = bfc, expandable or system (unset TP_ALLOCATOR or set it to one of them)");
  }
  if (bfc_split != BfcSplit::tensorflow && bfc_split != BfcSplit::exact) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device, ": bfc_split = ", static_cast<int>(bfc_split),
             " is not a BfcSplit; use BfcSplit::tensorflow or BfcSplit::exact");
  }
  if (split_threshold.has_value() && *split_threshold == 0) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device,
             ": split_threshold = 0 would split every chunk; leave it unset for the default of ",
             format_bytes(kDefaultSplitThreshold), " or give a positive size");
  }
  if (!(compaction_slack >= 0.0 && compaction_slack <= 1.0)) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device, ": compaction_slack = ", compaction_slack,
             " is outside [0, 1]; give the share of the in-use bytes growth may leave free before the arena"
             " compacts, e.g. 0.02");
  }
  if (compact_before_growth && share_granules) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device,
             ": compact_before_growth and share_granules are both set; compaction moves blocks only in an arena"
             " whose physical granules are not shared, so turn one of them off");
  }
  if (arena_shards == 0 || arena_shards > kMaxArenaShards) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device, ": arena_shards = ", arena_shards,
             " is outside [1, ", kMaxArenaShards,
             "]; give 1 for one arena, or the number of threads that allocate"
             " on this device at the same time (e.g. its streams)");
  }
  if (split_fraction.has_value()) {
    if (!(std::isfinite(*split_fraction) && *split_fraction > 0.0 && *split_fraction <= 1.0)) {
      TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device, ": split_fraction = ", *split_fraction,
               " is outside (0, 1]; give the share of the budget a chunk may waste before it is split, e.g. 0.05");
    }
    if (split_threshold.has_value()) {
      TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", device,
               ": split_threshold and split_fraction are"
               " both set; set one of them (split_fraction x budget is the threshold)");
    }
  }
}

std::size_t resolve_limit_bytes(const MemoryConfig& config, std::optional<std::size_t> capacity) {
  config.validate();
  std::size_t limit = 0;
  if (config.limit_bytes.has_value()) {
    limit = *config.limit_bytes;
    if (capacity.has_value() && limit > *capacity) {
      TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", config.device, ": limit_bytes = ", format_bytes(limit),
               " exceeds the source's capacity of ", format_bytes(*capacity),
               "; lower limit_bytes or use fraction instead");
    }
  } else if (!capacity.has_value()) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", config.device,
             ": the source has no known capacity, so the budget cannot be derived",
             config.fraction ? " from fraction" : "", "; set limit_bytes");
  } else {
    limit = *capacity;
    if (config.fraction.has_value()) {
      // Clamped in double: a product that rounds up to 2^64 must not reach the (undefined) conversion.
      // A fraction above 1 (managed memory) gives a budget above the capacity.
      const double budget = std::floor(static_cast<double>(*capacity) * *config.fraction);
      if (budget < static_cast<double>(kMaxAllocationBytes)) limit = static_cast<std::size_t>(budget);
    }
    limit = std::min(limit, kMaxAllocationBytes);
  }
  if (limit < kDefaultAlignment) {
    TP_THROW(InvalidArgument, "memory", "MemoryConfig for ", config.device, ": the budget comes out at ", limit,
             " bytes, below the minimum of ", kDefaultAlignment, "; raise limit_bytes or fraction");
  }
  return limit;
}

MemoryConfig apply_env_overrides(MemoryConfig config, const GetEnv& get_env) {
  if (const char* value = get_env("TP_ALLOW_GROWTH"); value != nullptr) config.policy = parse_allow_growth(value);
  if (const char* value = get_env("TP_ALLOCATOR"); value != nullptr) config.allocator = parse_allocator(value);
  if (const char* value = get_env("TP_BFC_SPLIT"); value != nullptr) config.bfc_split = parse_bfc_split(value);
  if (const char* value = get_env("TP_THREAD_CACHE"); value != nullptr) {
    config.thread_cache_bytes = parse_thread_cache(value);
  }
  if (const char* value = get_env("TP_ARENA_SHARDS"); value != nullptr) config.arena_shards = parse_arena_shards(value);
  if (const char* value = get_env("TP_MEMORY_FRACTION"); value != nullptr) {
    config.fraction = parse_fraction(value, config.allocator);
    config.limit_bytes.reset();
  }
  return config;
}

GetEnv env_without_cuda_only_overrides(GetEnv get_env, bool* hidden) {
  if (hidden != nullptr) *hidden = false;
  const char* allocator = get_env("TP_ALLOCATOR");
  if (allocator == nullptr) return get_env;
  const std::string word = lower(trim(allocator));
  if (word != to_string(AllocatorKind::cuda_malloc_async) && word != to_string(AllocatorKind::managed)) return get_env;
  if (hidden != nullptr) *hidden = true;
  return [get_env = std::move(get_env)](const char* name) -> const char* {
    const std::string_view variable(name);
    if (variable == "TP_ALLOCATOR") return nullptr;
    const char* value = get_env(name);
    if (variable == "TP_MEMORY_FRACTION" && value != nullptr) {
      const std::string_view text = trim(value);
      double fraction = 0.0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), fraction);
      if (error == std::errc{} && end == text.data() + text.size() && fraction > 1.0) return nullptr;
    }
    return value;
  };
}

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Every memory resource and stack tensorpool ships, each built small enough for tests, as "subjects" that the
// typed conformance and concurrency suites instantiate. Adding a resource here runs every shared test on it.

#include <cstddef>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/bfc_allocator.hpp"
#include "tensorpool/memory/expandable_arena.hpp"
#include "tensorpool/memory/failure_callback_adaptor.hpp"
#include "tensorpool/memory/host_resource.hpp"
#include "tensorpool/memory/limiting_adaptor.hpp"
#include "tensorpool/memory/logging_adaptor.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/pinned_host_resource.hpp"
#include "tensorpool/memory/sharded_arena.hpp"
#include "tensorpool/memory/sim_device_memory.hpp"
#include "tensorpool/memory/statistics_adaptor.hpp"
#include "tensorpool/memory/thread_cache_adaptor.hpp"
#include "tensorpool/memory/tracking_adaptor.hpp"

namespace tp::memory::testing {

inline constexpr std::size_t kSubjectCapacity = 64 * kMiB;

struct Subject {
  std::shared_ptr<void> keep_alive;  // outlives `resource` (e.g. a log stream)
  std::unique_ptr<MemoryResource> resource;
  std::optional<std::size_t> capacity;  // a request of more than this must fail with OutOfMemoryError
  bool reports_reserved = true;         // stats().bytes_reserved is meaningful
};

inline BfcOptions bfc_options(GrowthPolicy growth) {
  BfcOptions options;
  options.limit_bytes = kSubjectCapacity;
  options.growth = growth;
  return options;
}

inline std::unique_ptr<MemoryResource> make_bfc(GrowthPolicy growth) {
  return std::make_unique<BfcAllocator>(std::make_unique<SimDeviceMemory>(kSubjectCapacity), bfc_options(growth));
}

struct HostSubject {
  static constexpr const char* kName = "host";
  static Subject make() { return {nullptr, std::make_unique<HostResource>(), std::nullopt}; }
};
struct PinnedHostSubject {
  static constexpr const char* kName = "pinned_host";
  static Subject make() { return {nullptr, std::make_unique<PinnedHostResource>(), std::nullopt}; }
};
struct SimDeviceSubject {
  static constexpr const char* kName = "sim_device_memory";
  static Subject make() { return {nullptr, std::make_unique<SimDeviceMemory>(kSubjectCapacity), kSubjectCapacity}; }
};
struct BfcPreallocateSubject {
  static constexpr const char* kName = "bfc_preallocate";
  static Subject make() { return {nullptr, make_bfc(GrowthPolicy::preallocate), kSubjectCapacity}; }
};
struct BfcGrowSubject {
  static constexpr const char* kName = "bfc_grow";
  static Subject make() { return {nullptr, make_bfc(GrowthPolicy::grow), kSubjectCapacity}; }
};
// The expandable arena as configured by default, and with physical granules shared (ArenaOptions).
template <bool kShareGranules>
struct ExpandableSubjectOf {
  static constexpr const char* kName = kShareGranules ? "expandable_shared" : "expandable";
  static Subject make() {
    ArenaOptions options;
    options.limit_bytes = kSubjectCapacity;
    options.share_granules = kShareGranules;
    return {nullptr, std::make_unique<ExpandableArena>(std::make_unique<SimDeviceMemory>(kSubjectCapacity), options),
            kSubjectCapacity};
  }
};
using ExpandableSubject = ExpandableSubjectOf<false>;
using ExpandableSharedSubject = ExpandableSubjectOf<true>;
// Two expandable arenas under one budget (ShardedArena), over a source it borrows.
struct ShardedArenaSubject {
  static constexpr const char* kName = "sharded_expandable";
  static Subject make() {
    auto source = std::make_shared<SimDeviceMemory>(kSubjectCapacity);
    ArenaOptions options;
    options.limit_bytes = kSubjectCapacity;
    auto arena = std::make_unique<ShardedArena>(*source, options, 2);
    return {source, std::move(arena), kSubjectCapacity};
  }
};
struct LimitingSubject {
  static constexpr const char* kName = "limiting(host)";
  static Subject make() {
    return {nullptr, std::make_unique<LimitingAdaptor>(std::make_unique<HostResource>(), kSubjectCapacity),
            kSubjectCapacity};
  }
};
struct StatisticsSubject {
  static constexpr const char* kName = "statistics(bfc)";
  static Subject make() {
    return {nullptr, std::make_unique<StatisticsAdaptor>(make_bfc(GrowthPolicy::grow)), kSubjectCapacity};
  }
};
struct TrackingSubject {
  static constexpr const char* kName = "tracking(bfc)";
  static Subject make() {
    return {nullptr, std::make_unique<TrackingAdaptor>(make_bfc(GrowthPolicy::grow)), kSubjectCapacity};
  }
};
struct FailureCallbackSubject {
  static constexpr const char* kName = "failure_callback(bfc)";
  static Subject make() {
    return {nullptr,
            std::make_unique<FailureCallbackAdaptor>(make_bfc(GrowthPolicy::grow), [](std::size_t) { return false; }),
            kSubjectCapacity};
  }
};
struct ThreadCacheSubject {
  static constexpr const char* kName = "thread_cache(bfc)";
  static Subject make() {
    return {nullptr, std::make_unique<ThreadCacheAdaptor>(make_bfc(GrowthPolicy::grow)), kSubjectCapacity};
  }
};
struct LoggingSubject {
  static constexpr const char* kName = "logging(bfc)";
  static Subject make() {
    auto log = std::make_shared<std::ostringstream>();
    auto resource = std::make_unique<LoggingAdaptor>(make_bfc(GrowthPolicy::grow), *log);
    return {log, std::move(resource), kSubjectCapacity};
  }
};

template <AllocatorKind kKind, GrowthPolicy kPolicy>
struct StackSubject {
  static Subject make() {
    MemoryConfig config;
    config.device = "sim:0";
    config.allocator = kKind;
    config.policy = kPolicy;
    return {nullptr, make_sim_device_memory_stack(config, kSubjectCapacity), kSubjectCapacity};
  }
};
struct BfcStackSubject : StackSubject<AllocatorKind::bfc, GrowthPolicy::preallocate> {
  static constexpr const char* kName = "stack(bfc)";
};
struct BfcGrowStackSubject : StackSubject<AllocatorKind::bfc, GrowthPolicy::grow> {
  static constexpr const char* kName = "stack(bfc-grow)";
};
struct ExpandableStackSubject : StackSubject<AllocatorKind::expandable, GrowthPolicy::grow> {
  static constexpr const char* kName = "stack(expandable)";
};
struct SystemStackSubject : StackSubject<AllocatorKind::system, GrowthPolicy::grow> {
  static constexpr const char* kName = "stack(system)";
};

struct SubjectNames {
  template <typename T>
  static std::string GetName(int) {
    std::string name = T::kName;
    for (char& c : name) {
      if (c == '(' || c == ')' || c == '-') c = '_';
    }
    return name;
  }
};

}  // namespace tp::memory::testing

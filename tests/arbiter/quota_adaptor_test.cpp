// SPDX-License-Identifier: Apache-2.0
// QuotaAdaptor over a real memory stack (a simulated device under BFC): two sessions with quotas share one
// device; the one past its quota gets an OutOfMemoryError naming it while the other keeps allocating; a
// closed session's share is usable at once; concurrent sessions keep the arbiter's invariants (run under
// ThreadSanitizer). Also the ArbiterClient handle that owns a registration.
#include "tensorpool/arbiter/quota_adaptor.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tensorpool/arbiter/arbiter_client.hpp"
#include "tensorpool/arbiter/in_process_arbiter.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::arbiter {
namespace {

std::unique_ptr<memory::MemoryStack> make_device(std::size_t limit_bytes) {
  memory::MemoryConfig config;
  config.device = "sim:0";
  config.allocator = memory::AllocatorKind::bfc;
  config.limit_bytes = limit_bytes;
  return memory::make_sim_device_memory_stack(config, 64 * kMiB);
}

memory::AllocationTag tag(std::string name) {
  memory::AllocationTag result;
  result.name = std::move(name);
  result.kind = memory::AllocationKind::activation;
  return result;
}

std::string contains(const std::string& text, const std::vector<std::string>& needles) {
  std::string missing;
  for (const std::string& needle : needles) {
    if (text.find(needle) == std::string::npos) missing += "'" + needle + "' ";
  }
  return missing;
}

// Allocations of one session, freed at the end of the scope (before its adaptor goes).
struct Held {
  explicit Held(memory::MemoryResource& resource) : resource_(resource) {}
  ~Held() { clear(); }
  void* take(std::size_t bytes, const std::string& name) {
    void* ptr = resource_.allocate(bytes, 256, tag(name));
    std::memset(ptr, 0x5a, bytes);
    blocks_.emplace_back(ptr, bytes);
    return ptr;
  }
  void clear() {
    for (const auto& [ptr, bytes] : blocks_) resource_.deallocate(ptr, bytes);
    blocks_.clear();
  }
  memory::MemoryResource& resource_;
  std::vector<std::pair<void*, std::size_t>> blocks_;
};

TEST(QuotaAdaptor, SessionPastItsQuotaFailsWhileTheOtherRunsOn) {
  auto device = make_device(32 * kMiB);
  InProcessArbiter arbiter(16 * kMiB);
  QuotaAdaptor a(*device, arbiter, "session-a", 6 * kMiB);
  QuotaAdaptor b(*device, arbiter, "session-b", 8 * kMiB);
  EXPECT_EQ(a.name(), "quota:session-a");
  Held held_a(a);
  Held held_b(b);
  for (int i = 0; i < 6; ++i) held_a.take(kMiB, "a" + std::to_string(i));
  EXPECT_EQ(arbiter.usage(a.client().id()).reserved_bytes, 6 * kMiB);

  const std::size_t device_in_use = device->stats().bytes_in_use;
  try {
    held_a.take(kMiB, "one_too_many");
    ADD_FAILURE() << "session-a allocated past its quota";
  } catch (const OutOfMemoryError& error) {
    const std::string text = error.what();
    EXPECT_EQ(contains(text, {"session-a", "quota of 6.00 MiB", "holds 6.00 MiB", "budget is 16.00 MiB", "one_too_many",
                              "raise this session's quota", "sim:0"}),
              "")
        << text;
    EXPECT_EQ(error.report().device, "sim:0");
    EXPECT_EQ(error.report().allocator, "quota:session-a");
    EXPECT_EQ(error.report().limit_bytes, 6 * kMiB);
    EXPECT_EQ(error.report().in_use_bytes, 6 * kMiB);
    EXPECT_EQ(error.report().reserved_bytes, 6 * kMiB) << "the arbiter's total";
    EXPECT_FALSE(error.report().is_fragmentation());
  }
  EXPECT_EQ(device->stats().bytes_in_use, device_in_use) << "the refused block went back to the device";

  // session-b is not disturbed: it allocates up to its own quota.
  for (int i = 0; i < 8; ++i) held_b.take(kMiB, "b" + std::to_string(i));
  EXPECT_EQ(arbiter.reserved_bytes(), 14 * kMiB);

  const memory::MemoryStats stats = a.stats();
  EXPECT_EQ(stats.bytes_in_use, 6 * kMiB);
  EXPECT_EQ(stats.peak_bytes_in_use, 6 * kMiB);
  EXPECT_EQ(stats.bytes_requested, 6 * kMiB);
  EXPECT_EQ(stats.num_allocs, 6u);
  EXPECT_EQ(stats.num_ooms, 1u);
  EXPECT_EQ(stats.bytes_limit, 6 * kMiB);
  EXPECT_EQ(stats.largest_free_block, 0u) << "its quota is spent";
  EXPECT_EQ(stats.bytes_reserved, device->stats().bytes_reserved) << "reserved bytes are the device's";
  EXPECT_EQ(b.stats().num_ooms, 0u);
}

TEST(QuotaAdaptor, SharedBudgetRefusalTellsToCloseOtherSessions) {
  auto device = make_device(32 * kMiB);
  InProcessArbiter arbiter(10 * kMiB);
  QuotaAdaptor a(*device, arbiter, "session-a", 8 * kMiB);
  QuotaAdaptor b(*device, arbiter, "session-b", 8 * kMiB);
  Held held_a(a);
  Held held_b(b);
  held_a.take(6 * kMiB, "a");
  held_b.take(4 * kMiB, "b");
  try {
    held_b.take(kMiB, "b_more");
    ADD_FAILURE() << "the budget was exceeded";
  } catch (const OutOfMemoryError& error) {
    const std::string text = error.what();
    EXPECT_EQ(contains(text, {"session-b", "exceed the shared budget", "quota of 8.00 MiB", "budget is 10.00 MiB",
                              "10.00 MiB are reserved by all clients", "close other sessions"}),
              "")
        << text;
    EXPECT_EQ(error.report().limit_bytes, 4 * kMiB) << "what session-b could reach now";
  }
  EXPECT_EQ(b.stats().largest_free_block, 0u);
}

TEST(QuotaAdaptor, ClosedSessionsShareIsAvailableAtOnce) {
  auto device = make_device(32 * kMiB);
  InProcessArbiter arbiter(12 * kMiB);
  QuotaAdaptor c(*device, arbiter, "session-c", 12 * kMiB);
  Held held_c(c);
  {
    QuotaAdaptor a(*device, arbiter, "session-a", 10 * kMiB);
    Held held_a(a);
    held_a.take(10 * kMiB, "a");
    EXPECT_THROW(held_c.take(4 * kMiB, "c"), OutOfMemoryError);
  }  // a's memory is freed, then its adaptor unregisters it
  EXPECT_EQ(arbiter.clients().size(), 1u);
  EXPECT_EQ(arbiter.reserved_bytes(), 0u);
  held_c.take(12 * kMiB, "c_all");
  EXPECT_EQ(arbiter.usage(c.client().id()).reserved_bytes, 12 * kMiB);
}

TEST(QuotaAdaptor, DeviceOutOfMemoryNamesTheClient) {
  auto device = make_device(4 * kMiB);  // smaller than the arbiter's budget: the device refuses first
  InProcessArbiter arbiter(16 * kMiB);
  QuotaAdaptor a(*device, arbiter, "session-a", 16 * kMiB);
  try {
    (void)a.allocate(8 * kMiB, 256, tag("huge"));
    ADD_FAILURE() << "the device served more than its limit";
  } catch (const OutOfMemoryError& error) {
    const std::string text = error.what();
    EXPECT_EQ(contains(text, {"out of memory on sim:0", "session-a", "no other client holds memory"}), "") << text;
    EXPECT_EQ(text.find("close other sessions"), std::string::npos) << "nobody else holds memory: " << text;
  }
  EXPECT_EQ(a.stats().num_ooms, 1u);
  EXPECT_EQ(arbiter.reserved_bytes(), 0u) << "nothing was reserved for the failed request";
}

TEST(QuotaAdaptor, DeviceOutOfMemoryNamesWhatOtherClientsHold) {
  auto device = make_device(8 * kMiB);  // smaller than the arbiter's budget: the device refuses first
  InProcessArbiter arbiter(32 * kMiB);
  QuotaAdaptor a(*device, arbiter, "session-a", 16 * kMiB);
  QuotaAdaptor b(*device, arbiter, "session-b", 16 * kMiB);
  Held held_a(a);
  held_a.take(3 * kMiB, "a");
  try {
    (void)b.allocate(6 * kMiB, 256, tag("b_wide"));
    ADD_FAILURE() << "the device served more than its limit";
  } catch (const OutOfMemoryError& error) {
    const std::string text = error.what();
    EXPECT_EQ(contains(text, {"session-b", "holds 0 B", "other clients hold 3.00 MiB", "close other sessions"}), "")
        << text;
  }
}

TEST(QuotaAdaptor, ChargesWhatTheUpstreamHandsOut) {
  auto device = make_device(32 * kMiB);
  InProcessArbiter arbiter(16 * kMiB);
  QuotaAdaptor a(*device, arbiter, "session-a", 16 * kMiB);
  void* ptr = a.allocate(1000, 256, tag("small"));
  const std::size_t charged = device->allocated_size(ptr, 1000);
  EXPECT_GE(charged, 1000u);
  EXPECT_EQ(arbiter.reserved_bytes(), charged);
  EXPECT_EQ(a.stats().bytes_in_use, charged);
  EXPECT_EQ(a.stats().bytes_requested, 1000u);
  a.reset_peak();
  a.deallocate(ptr, 1000);
  EXPECT_EQ(arbiter.reserved_bytes(), 0u);
  const memory::MemoryStats stats = a.stats();
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_EQ(stats.peak_bytes_in_use, charged) << "reset_peak restarted the peak from the live bytes";
  EXPECT_EQ(stats.num_frees, 1u);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes_in_use, 0u);
}

// Two sessions, four threads each, allocating and freeing at random on one device; the budget is tighter
// than the quotas' sum so both limits refuse. Clean under ThreadSanitizer.
TEST(QuotaAdaptor, ConcurrentSessionsKeepTheBudget) {
  auto device = make_device(32 * kMiB);
  InProcessArbiter arbiter(12 * kMiB);
  QuotaAdaptor sessions[2] = {QuotaAdaptor(*device, arbiter, "session-a", 8 * kMiB),
                              QuotaAdaptor(*device, arbiter, "session-b", 8 * kMiB)};
  std::atomic<int> refusals{0};
  std::atomic<bool> done{false};
  std::thread checker([&] {
    while (!done.load()) {
      std::size_t sum = 0;
      for (const ClientUsage& client : arbiter.clients()) {
        EXPECT_LE(client.reserved_bytes, client.quota_bytes);
        sum += client.reserved_bytes;
      }
      EXPECT_LE(sum, arbiter.budget_bytes());
    }
  });
  std::vector<std::thread> workers;
  for (int thread = 0; thread < 8; ++thread) {
    workers.emplace_back([&, thread] {
      QuotaAdaptor& session = sessions[thread % 2];
      std::mt19937 random(77u + static_cast<unsigned>(thread));
      std::vector<std::pair<void*, std::size_t>> live;
      for (int i = 0; i < 2000; ++i) {
        if (!live.empty() && random() % 2 == 0) {
          session.deallocate(live.back().first, live.back().second);
          live.pop_back();
          continue;
        }
        const std::size_t bytes = (1 + random() % 16) * 64 * kKiB;
        try {
          live.emplace_back(session.allocate(bytes), bytes);
        } catch (const OutOfMemoryError&) {
          refusals.fetch_add(1);
        }
      }
      for (const auto& [ptr, bytes] : live) session.deallocate(ptr, bytes);
    });
  }
  for (std::thread& worker : workers) worker.join();
  done.store(true);
  checker.join();
  EXPECT_GT(refusals.load(), 0) << "the limits were never reached";
  EXPECT_EQ(arbiter.reserved_bytes(), 0u);
  EXPECT_EQ(device->stats().bytes_in_use, 0u);
  EXPECT_EQ(sessions[0].stats().bytes_in_use + sessions[1].stats().bytes_in_use, 0u);
}

TEST(ArbiterClient, RegistersAndUnregistersWithItsLifetime) {
  InProcessArbiter arbiter(8 * kMiB);
  std::optional<ArbiterClient> first;
  first.emplace(arbiter, "first", 4 * kMiB);
  ASSERT_TRUE(first->registered());
  EXPECT_EQ(first->name(), "first");
  EXPECT_TRUE(first->try_reserve(3 * kMiB));
  EXPECT_EQ(first->usage().reserved_bytes, 3 * kMiB);

  ArbiterClient moved(std::move(*first));
  EXPECT_FALSE(first->registered());
  EXPECT_TRUE(moved.registered());
  first.reset();  // a moved-from handle unregisters nothing
  EXPECT_EQ(arbiter.reserved_bytes(), 3 * kMiB);

  ArbiterClient other(arbiter, "other", 8 * kMiB);
  EXPECT_FALSE(other.try_reserve(8 * kMiB));
  other = std::move(moved);  // unregisters "other", takes over "first"
  ASSERT_EQ(arbiter.clients().size(), 1u);
  EXPECT_EQ(arbiter.clients().front().name, "first");
  other.reset();
  other.reset();  // idempotent
  EXPECT_EQ(arbiter.reserved_bytes(), 0u);
  EXPECT_TRUE(arbiter.clients().empty());

  EXPECT_THROW(ArbiterClient(arbiter, "bad", 0), InvalidArgument);
  auto device = make_device(8 * kMiB);
  EXPECT_THROW(QuotaAdaptor(*device, std::move(other)), InvalidArgument);
}

}  // namespace
}  // namespace tp::arbiter

// SPDX-License-Identifier: Apache-2.0
// Every MemoryArbiter keeps the same contract: registration checks, quota and budget limits (quotas may
// over-commit the budget), release and unregister, stale ids, and the invariants under 8 threads hammering
// two clients. One typed suite, instantiated for the in-process and the shared-memory arbiter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tensorpool/arbiter/in_process_arbiter.hpp"
#include "tensorpool/arbiter/memory_arbiter.hpp"
#include "tensorpool/arbiter/shared_memory_arbiter.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"

namespace tp::arbiter {
namespace {

struct InProcessFactory {
  std::unique_ptr<MemoryArbiter> make(std::size_t budget) { return std::make_unique<InProcessArbiter>(budget); }
};

// Unique segment names (pid + counter), unlinked when the test ends.
class SharedMemoryFactory {
 public:
  ~SharedMemoryFactory() {
    for (const std::string& name : names_) SharedMemoryArbiter::remove(name);
  }
  std::unique_ptr<MemoryArbiter> make(std::size_t budget) {
    static std::atomic<int> counter{0};
    names_.push_back("/tensorpool-conformance-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    return std::make_unique<SharedMemoryArbiter>(names_.back(), budget);
  }

 private:
  std::vector<std::string> names_;
};

// One consistent snapshot: each client within its quota, the sum within the budget, peaks above reservations.
void expect_invariants(const MemoryArbiter& arbiter) {
  std::size_t sum = 0;
  for (const ClientUsage& client : arbiter.clients()) {
    EXPECT_LE(client.reserved_bytes, client.quota_bytes) << client.name;
    EXPECT_LE(client.quota_bytes, arbiter.budget_bytes()) << client.name;
    EXPECT_GE(client.peak_bytes, client.reserved_bytes) << client.name;
    sum += client.reserved_bytes;
  }
  EXPECT_LE(sum, arbiter.budget_bytes());
}

template <typename Factory>
class ArbiterConformance : public ::testing::Test {
 protected:
  std::unique_ptr<MemoryArbiter> make(std::size_t budget) { return factory_.make(budget); }

 private:
  Factory factory_;
};

using Factories = ::testing::Types<InProcessFactory, SharedMemoryFactory>;
TYPED_TEST_SUITE(ArbiterConformance, Factories);

TYPED_TEST(ArbiterConformance, RejectsBadBudgetsAndRegistrations) {
  EXPECT_THROW(this->make(0), InvalidArgument);
  auto arbiter = this->make(10 * kMiB);
  EXPECT_EQ(arbiter->budget_bytes(), 10 * kMiB);
  EXPECT_THROW((void)arbiter->register_client("", kMiB), InvalidArgument);
  EXPECT_THROW((void)arbiter->register_client("zero", 0), InvalidArgument);
  try {
    (void)arbiter->register_client("greedy", 10 * kMiB + 1);
    ADD_FAILURE() << "a quota above the budget was accepted";
  } catch (const InvalidArgument& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("greedy"), std::string::npos) << text;
    EXPECT_NE(text.find("quota"), std::string::npos) << text;
    EXPECT_NE(text.find("[runtime]"), std::string::npos) << text;
  }
  EXPECT_TRUE(arbiter->register_client("whole", 10 * kMiB).valid());
  EXPECT_EQ(arbiter->clients().size(), 1u);
}

TYPED_TEST(ArbiterConformance, QuotaCapsOneClientAndBudgetCapsAll) {
  auto arbiter = this->make(10 * kMiB);
  // 8 + 8 > 10: quotas may over-commit the budget.
  const ClientId a = arbiter->register_client("a", 8 * kMiB);
  const ClientId b = arbiter->register_client("b", 8 * kMiB);
  EXPECT_TRUE(arbiter->try_reserve(a, 6 * kMiB));

  ReserveRefusal refusal;
  EXPECT_FALSE(arbiter->try_reserve(b, 6 * kMiB, refusal)) << "6 + 6 would pass the 10 MiB budget";
  EXPECT_TRUE(refusal.over_budget);
  EXPECT_FALSE(refusal.over_quota);
  EXPECT_EQ(refusal.client.name, "b");
  EXPECT_EQ(refusal.client.reserved_bytes, 0u);
  EXPECT_EQ(refusal.reserved_bytes, 6 * kMiB);
  EXPECT_EQ(refusal.budget_bytes, 10 * kMiB);

  EXPECT_TRUE(arbiter->try_reserve(b, 4 * kMiB)) << "exactly the budget is allowed";
  EXPECT_EQ(arbiter->reserved_bytes(), 10 * kMiB);
  EXPECT_FALSE(arbiter->try_reserve(b, 1));
  EXPECT_TRUE(arbiter->try_reserve(b, 0)) << "zero bytes always fit";

  arbiter->release(a, 6 * kMiB);
  EXPECT_TRUE(arbiter->try_reserve(b, 4 * kMiB)) << "b reaches its quota exactly";
  EXPECT_FALSE(arbiter->try_reserve(b, 1, refusal));
  EXPECT_TRUE(refusal.over_quota);
  EXPECT_FALSE(refusal.over_budget);
  EXPECT_EQ(refusal.client.reserved_bytes, 8 * kMiB);
  EXPECT_EQ(refusal.client.quota_bytes, 8 * kMiB);
  expect_invariants(*arbiter);
}

TYPED_TEST(ArbiterConformance, ReleaseReturnsBytesAndPeakStays) {
  auto arbiter = this->make(10 * kMiB);
  const ClientId a = arbiter->register_client("a", 4 * kMiB);
  ASSERT_TRUE(arbiter->try_reserve(a, 3 * kMiB));
  arbiter->release(a, kMiB);
  ClientUsage usage = arbiter->usage(a);
  EXPECT_EQ(usage.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(usage.peak_bytes, 3 * kMiB);
  EXPECT_EQ(usage.quota_bytes, 4 * kMiB);
  EXPECT_EQ(usage.name, "a");
  EXPECT_EQ(usage.id, a);
  EXPECT_EQ(usage.process_id, ::getpid());
  arbiter->release(a, 100 * kMiB);  // more than held: releases what it holds
  EXPECT_EQ(arbiter->usage(a).reserved_bytes, 0u);
  EXPECT_EQ(arbiter->reserved_bytes(), 0u);
}

TYPED_TEST(ArbiterConformance, UnregisterReturnsEverythingAtOnce) {
  auto arbiter = this->make(10 * kMiB);
  const ClientId a = arbiter->register_client("a", 8 * kMiB);
  ASSERT_TRUE(arbiter->try_reserve(a, 8 * kMiB));
  const ClientId c = arbiter->register_client("c", 8 * kMiB);
  EXPECT_FALSE(arbiter->try_reserve(c, 8 * kMiB));
  arbiter->unregister_client(a);
  EXPECT_EQ(arbiter->reserved_bytes(), 0u);
  EXPECT_TRUE(arbiter->try_reserve(c, 8 * kMiB)) << "a's share is available as soon as it unregisters";
  ASSERT_EQ(arbiter->clients().size(), 1u);
  EXPECT_EQ(arbiter->clients().front().name, "c");
}

TYPED_TEST(ArbiterConformance, StaleIdsAreRefused) {
  auto arbiter = this->make(10 * kMiB);
  const ClientId a = arbiter->register_client("a", 4 * kMiB);
  arbiter->unregister_client(a);
  const ClientId reused = arbiter->register_client("b", 4 * kMiB);  // may take a's slot, never its identity
  EXPECT_NE(reused, a);
  EXPECT_THROW((void)arbiter->try_reserve(a, 1), InvalidArgument);
  EXPECT_THROW((void)arbiter->usage(a), InvalidArgument);
  EXPECT_THROW((void)arbiter->usage(ClientId{}), InvalidArgument);
  EXPECT_THROW((void)arbiter->try_reserve(ClientId{12345, 1}, 1), InvalidArgument);
  arbiter->release(a, kMiB);      // ignored
  arbiter->unregister_client(a);  // ignored
  arbiter->unregister_client(ClientId{});
  EXPECT_EQ(arbiter->clients().size(), 1u);
  EXPECT_TRUE(arbiter->try_reserve(reused, 4 * kMiB));
}

TYPED_TEST(ArbiterConformance, ClientsListsEveryRegistration) {
  auto arbiter = this->make(10 * kMiB);
  const ClientId a = arbiter->register_client("session-a", 2 * kMiB);
  const ClientId b = arbiter->register_client("session-b", 3 * kMiB);
  ASSERT_TRUE(arbiter->try_reserve(b, kMiB));
  const std::vector<ClientUsage> clients = arbiter->clients();
  ASSERT_EQ(clients.size(), 2u);
  EXPECT_EQ(clients[0].id, a);
  EXPECT_EQ(clients[0].name, "session-a");
  EXPECT_EQ(clients[1].name, "session-b");
  EXPECT_EQ(clients[1].quota_bytes, 3 * kMiB);
  EXPECT_EQ(clients[1].reserved_bytes, kMiB);
  EXPECT_EQ(clients[1].process_id, ::getpid());
}

// 8 threads, each alternating between two clients whose quotas (70 units each) over-commit the budget (100
// units), so both limits refuse requests; a checker thread takes snapshots meanwhile. Clean under TSan.
TYPED_TEST(ArbiterConformance, ConcurrentClientsKeepInvariants) {
  constexpr std::size_t kUnit = kKiB;
  constexpr int kThreads = 8;
  constexpr int kIterations = 20000;
  auto arbiter = this->make(100 * kUnit);
  const ClientId clients[2] = {arbiter->register_client("a", 70 * kUnit), arbiter->register_client("b", 70 * kUnit)};
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> granted{0};
  std::atomic<std::uint64_t> refused{0};

  std::thread checker([&] {
    while (!done.load()) expect_invariants(*arbiter);
  });
  std::vector<std::thread> workers;
  for (int thread = 0; thread < kThreads; ++thread) {
    workers.emplace_back([&, thread] {
      const unsigned seed = 1234u + static_cast<unsigned>(thread);
      std::mt19937 random(seed);
      std::size_t held[2] = {0, 0};
      for (int i = 0; i < kIterations; ++i) {
        const int which = (thread + i) % 2;
        const std::size_t bytes = (1 + random() % 20) * kUnit;
        if (held[which] > 0 && random() % 2 == 0) {
          const std::size_t back = std::min(held[which], bytes);
          arbiter->release(clients[which], back);
          held[which] -= back;
        } else if (arbiter->try_reserve(clients[which], bytes)) {
          held[which] += bytes;
          granted.fetch_add(1);
        } else {
          refused.fetch_add(1);
        }
      }
      for (int which = 0; which < 2; ++which) arbiter->release(clients[which], held[which]);
    });
  }
  for (std::thread& worker : workers) worker.join();
  done.store(true);
  checker.join();

  expect_invariants(*arbiter);
  EXPECT_EQ(arbiter->reserved_bytes(), 0u);
  EXPECT_GT(granted.load(), 0u);
  EXPECT_GT(refused.load(), 0u) << "the limits were never reached; the test exercised nothing";
  for (const ClientId client : clients) {
    const ClientUsage usage = arbiter->usage(client);
    EXPECT_EQ(usage.reserved_bytes, 0u);
    EXPECT_LE(usage.peak_bytes, usage.quota_bytes);
    EXPECT_GT(usage.peak_bytes, 0u);
  }
}

}  // namespace
}  // namespace tp::arbiter

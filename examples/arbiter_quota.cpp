// SPDX-License-Identifier: Apache-2.0
// examples/arbiter_quota.cpp: two sessions' quotas over one 16 GiB device (docs/arbiter.md).
#include <cstdio>

#include "tensorpool/arbiter/in_process_arbiter.hpp"
#include "tensorpool/arbiter/quota_adaptor.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/memory_stack.hpp"

int main() {
  tp::memory::MemoryConfig config;
  config.device = "sim:0";
  config.policy = tp::memory::GrowthPolicy::grow;  // pages are taken as allocations need them
  auto stack = tp::memory::make_sim_device_memory_stack(config, 16 * tp::kGiB);
  tp::memory::MemoryStack& device = *stack;
  const std::size_t bytes = 64 * tp::kMiB;

  tp::arbiter::InProcessArbiter arbiter(device.limit_bytes());
  tp::arbiter::QuotaAdaptor session_a(device, arbiter, "session-a", 6 * tp::kGiB);
  tp::arbiter::QuotaAdaptor session_b(device, arbiter, "session-b", 6 * tp::kGiB);
  void* p = session_a.allocate(bytes);  // reserved with the arbiter at the size the device really hands out
  session_a.deallocate(p, bytes);       // released, then freed on the device
  std::printf("device in use after the free: %zu B\n", device.stats().bytes_in_use);
}

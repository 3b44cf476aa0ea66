// SPDX-License-Identifier: Apache-2.0
// Allocates through an installed tensorpool's memory stack and prints its stats.
#include <cstdio>

#include "tensorpool/memory/memory_stack.hpp"

int main() {
  tp::memory::MemoryConfig config;
  config.device = "sim:0";
  config.allocator = tp::memory::AllocatorKind::expandable;
  auto stack = tp::memory::make_sim_device_memory_stack(config, 64 << 20);
  void* block = stack->allocate(1 << 20);
  const bool in_use = stack->stats().bytes_in_use >= (1u << 20);
  stack->deallocate(block, 1 << 20);
  std::printf("consumer: %s\n", in_use ? "ok" : "stats wrong");
  return in_use ? 0 : 1;
}

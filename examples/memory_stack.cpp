// SPDX-License-Identifier: Apache-2.0
// examples/memory_stack.cpp: device memory stacks configured and used directly (README, docs/memory.md).
#include <cstdio>

#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/memory_stack.hpp"

namespace {

// docs/memory.md: a stack that grows on demand up to half of a 1 GiB device, and the resource interface.
void growing_stack() {
  tp::memory::MemoryConfig config;
  config.device = "sim:0";
  config.policy = tp::memory::GrowthPolicy::grow;            // preallocate (default) | grow (allow_growth)
  config.fraction = 0.5;                                     // or limit_bytes = ...; not both
  config.allocator = tp::memory::AllocatorKind::expandable;  // bfc (default) | expandable | system
  config = tp::memory::apply_env_overrides(config);          // TP_ALLOW_GROWTH, TP_ALLOCATOR, TP_MEMORY_FRACTION
  auto stack = tp::memory::make_sim_device_memory_stack(config, 1 * tp::kGiB);
  tp::memory::AllocationTag tag{
      "dense/kernel", "VarHandle", {784, 512}, "float32", tp::memory::AllocationKind::parameter};
  void* p = stack->allocate(784 * 512 * 4, 256, tag);
  void* q = stack->allocate(4096);                 // alignment 256 and an empty tag by default
  stack->deallocate(q, 4096);                      // noexcept; `bytes` as passed to allocate
  tp::memory::MemoryStats stats = stack->stats();  // see below
  stack->reset_peak();                             // peaks restart from the current values
  std::size_t returned = stack->trim();            // cached free memory back to the source; the bytes
  std::printf("in use %zu B, peak %zu B, trimmed %zu B\n", stats.bytes_in_use, stats.peak_bytes_in_use, returned);
  stack->deallocate(p, 784 * 512 * 4);
}

}  // namespace

int main() {
  tp::memory::MemoryConfig config;  // TF-like defaults: BFC, preallocate
  config.device = "sim:0";
  config.allocator = tp::memory::AllocatorKind::expandable;  // or bfc | system; TP_ALLOCATOR overrides
  config = tp::memory::apply_env_overrides(config);          // TP_ALLOW_GROWTH, TP_MEMORY_FRACTION
  auto stack = tp::memory::make_sim_device_memory_stack(config, 1ull << 30);
  tp::memory::AllocationTag tag{
      "dense/kernel", "VarHandle", {784, 512}, "float32", tp::memory::AllocationKind::parameter};
  void* p = stack->allocate(784 * 512 * 4, 256, tag);  // the tag reaches reports
  stack->deallocate(p, 784 * 512 * 4);
  stack->trim();  // give cached memory back to the device
  growing_stack();
}

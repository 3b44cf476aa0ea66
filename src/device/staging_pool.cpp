#include "device/staging_pool.hpp"

#include <cstdio>
#include <new>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/host_resource.hpp"
#include "tensorpool/memory/pinned_host_resource.hpp"

namespace tp::device {

namespace {

// Staging memory grows on demand and is bounded only by the host: a copy needs as many bytes as it moves.
memory::MemoryConfig staging_config(const std::string& owner) {
  memory::MemoryConfig config;
  config.device = owner + "/staging";
  config.policy = memory::GrowthPolicy::grow;
  const std::size_t physical = memory::host_physical_memory_bytes();
  config.limit_bytes = physical != 0 ? physical : 64 * kGiB;
  config.tracking = false;
  return config;
}

std::shared_ptr<memory::MemoryStack> make_stack(const std::string& owner, bool pinned) {
  const memory::MemoryConfig config = staging_config(owner);
  if (pinned) return memory::make_memory_stack(config, std::make_unique<memory::PinnedHostResource>());
  return memory::make_memory_stack(config, std::make_unique<memory::HostResource>());
}

}  // namespace

std::shared_ptr<StagingPool> StagingPool::create(std::string owner, bool pinned) {
  return std::shared_ptr<StagingPool>(new StagingPool(std::move(owner), pinned));
}

StagingPool::StagingPool(std::string owner, bool pinned)
    : owner_(std::move(owner)), stack_(make_stack(owner_, pinned)), pinned_(pinned) {}

void StagingPool::fall_back_to_pageable(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (!pinned_.load(std::memory_order_relaxed)) return;
  std::fprintf(stderr, "[device] %s: pinned staging memory refused (%s); staging copies through pageable memory\n",
               owner_.c_str(), why.c_str());
  stack_ = make_stack(owner_, false);
  pinned_.store(false, std::memory_order_relaxed);
}

std::shared_ptr<void> StagingPool::acquire(std::size_t bytes) {
  std::shared_ptr<memory::MemoryStack> stack;
  {
    std::lock_guard lock(mutex_);
    stack = stack_;
  }
  void* block = nullptr;
  std::string refusal;
  try {
    block = stack->allocate(bytes);
  } catch (const DeviceError& error) {  // the OS refused to lock pages
    refusal = error.what();
  } catch (const std::bad_alloc& error) {  // the BFC layer reports a refused mlock (RLIMIT_MEMLOCK) as OOM
    if (!pinned()) throw;
    refusal = error.what();
  }
  if (block == nullptr) {
    fall_back_to_pageable(refusal);
    {
      std::lock_guard lock(mutex_);
      stack = stack_;
    }
    block = stack->allocate(bytes);
  }
  // The deleter holds the stack the block came from (a fallback may have replaced stack_ since).
  try {
    return std::shared_ptr<void>(block, [stack, bytes](void* ptr) noexcept { stack->deallocate(ptr, bytes); });
  } catch (...) {  // no room for the control block
    stack->deallocate(block, bytes);
    throw;
  }
}

memory::MemoryStats StagingPool::stats() const {
  std::lock_guard lock(mutex_);
  return stack_->stats();
}

}  // namespace tp::device

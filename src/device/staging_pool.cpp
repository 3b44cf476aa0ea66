// SPDX-License-Identifier: Apache-2.0
#include "device/staging_pool.hpp"

#include <new>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
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

// A stack over `upstream`, or over pageable host memory when it is null.
std::shared_ptr<memory::MemoryStack> make_stack(const std::string& owner,
                                                std::unique_ptr<memory::MemoryResource> upstream) {
  if (upstream == nullptr) upstream = std::make_unique<memory::HostResource>();
  return memory::make_memory_stack(staging_config(owner), std::move(upstream));
}

constexpr const char* kPageable = "pageable";

}  // namespace

std::shared_ptr<StagingPool> StagingPool::create(std::string owner, bool pinned) {
  std::unique_ptr<memory::MemoryResource> upstream;
  if (pinned) upstream = std::make_unique<memory::PinnedHostResource>();
  return std::shared_ptr<StagingPool>(
      new StagingPool(std::move(owner), pinned ? "mlock" : kPageable, std::move(upstream)));
}

std::shared_ptr<StagingPool> StagingPool::create(std::string owner, std::string kind,
                                                 const UpstreamFactory& make_upstream) {
  if (kind.empty() || !make_upstream) {
    TP_THROW(InvalidArgument, "device", owner,
             ": a staging pool over a device's own upstream needs a kind naming"
             " it and a factory; give both, or StagingPool::create(owner, pinned) for page-locked host memory");
  }
  std::unique_ptr<memory::MemoryResource> upstream = make_upstream();
  if (upstream == nullptr) {
    TP_THROW(InvalidArgument, "device", owner, ": the staging upstream factory for ", kind,
             " returned null; it must return the resource (or throw why it cannot)");
  }
  return std::shared_ptr<StagingPool>(new StagingPool(std::move(owner), std::move(kind), std::move(upstream)));
}

StagingPool::StagingPool(std::string owner, std::string pinned_kind, std::unique_ptr<memory::MemoryResource> upstream)
    : owner_(std::move(owner)), pinned_kind_(std::move(pinned_kind)), pinned_(upstream != nullptr) {
  stack_ = make_stack(owner_, std::move(upstream));
}

std::string StagingPool::kind() const { return pinned() ? pinned_kind_ : std::string(kPageable); }

void StagingPool::fall_back_to_pageable(const std::string& why) {
  std::lock_guard lock(mutex_);
  if (!pinned_.load(std::memory_order_relaxed)) return;
  TP_LOG(warning, "device", owner_, ": pinned staging memory refused (", why,
         "); staging copies through pageable memory");
  stack_ = make_stack(owner_, nullptr);
  pinned_.store(false, std::memory_order_relaxed);
}

std::shared_ptr<void> StagingPool::acquire(std::size_t bytes) {
  std::shared_ptr<memory::MemoryStack> stack;
  bool from_pinned = false;  // whether `stack` is the pinned one (another thread may fall back meanwhile)
  {
    std::lock_guard lock(mutex_);
    stack = stack_;
    from_pinned = pinned_.load(std::memory_order_relaxed);
  }
  void* block = nullptr;
  std::string refusal;
  try {
    block = stack->allocate(bytes);
  } catch (const DeviceError& error) {  // the OS refused to lock pages, or the driver to pin them
    if (!from_pinned) throw;
    refusal = error.what();
  } catch (const std::bad_alloc& error) {  // the BFC layer reports a refused upstream (RLIMIT_MEMLOCK) as OOM
    if (!from_pinned) throw;
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

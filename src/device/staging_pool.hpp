// SPDX-License-Identifier: Apache-2.0
#pragma once
// StagingPool: host memory through which a device's copies pass (as CUDA stages pageable copies through
// pinned buffers). Pinned by default: page-locked host memory (PinnedHostResource, kind "mlock"), or memory
// a backend's driver pins itself when the device gives the pool its own upstream (opencl devices:
// CL_MEM_ALLOC_HOST_PTR buffers). When that upstream refuses (RLIMIT_MEMLOCK, a driver out of memory), the
// pool says so once on stderr and stages through pageable memory from then on: copies stay correct, only the
// "pinned" claim changes, and pinned() and kind() report it.
//
// Above the upstream sits a growing BFC stack (staging_config), so upstream calls are rare: a region serves
// many blocks and stays until the stack goes.
//
// A staging block is a std::shared_ptr<void> whose deleter holds the memory stack it came from, so a block
// captured by a stream task (possibly of another device) stays valid after the pool itself is gone.

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "tensorpool/memory/memory_stack.hpp"

namespace tp::device {

class StagingPool {
 public:
  // `owner` names the device in stack names and messages; `pinned` false stages through pageable memory.
  static std::shared_ptr<StagingPool> create(std::string owner, bool pinned = true);
  // Stages through the pinned memory `make_upstream` returns (called once, now); `kind` names it for kind()
  // (e.g. "CL_MEM_ALLOC_HOST_PTR"). Throws tp::InvalidArgument for an empty `kind` or `make_upstream`.
  using UpstreamFactory = std::function<std::unique_ptr<memory::MemoryResource>()>;
  static std::shared_ptr<StagingPool> create(std::string owner, std::string kind, const UpstreamFactory& make_upstream);

  // A block of at least `bytes` (> 0) host bytes, returned to the pool when the last holder drops it.
  std::shared_ptr<void> acquire(std::size_t bytes);
  bool pinned() const noexcept { return pinned_.load(std::memory_order_relaxed); }
  // What the blocks are: the pinned kind ("mlock", or the device's own, e.g. "CL_MEM_ALLOC_HOST_PTR") while
  // pinned(), "pageable" otherwise.
  std::string kind() const;
  memory::MemoryStats stats() const;

 private:
  StagingPool(std::string owner, std::string pinned_kind, std::unique_ptr<memory::MemoryResource> upstream);
  void fall_back_to_pageable(const std::string& why);

  const std::string owner_;
  const std::string pinned_kind_;  // kind() while pinned
  mutable std::mutex mutex_;       // guards the switch of stack_ from pinned to pageable
  std::shared_ptr<memory::MemoryStack> stack_;
  std::atomic<bool> pinned_;
};

}  // namespace tp::device

#pragma once
// StagingPool: host memory through which a device's copies pass (as CUDA stages pageable copies through
// pinned buffers). Pinned (page-locked) by default; when the OS refuses to lock pages (RLIMIT_MEMLOCK), it
// says so once on stderr and stages through pageable memory from then on: copies stay correct, only the
// "pinned" claim changes, and pinned() reports it.
//
// A staging block is a std::shared_ptr<void> whose deleter holds the memory stack it came from, so a block
// captured by a stream task (possibly of another device) stays valid after the pool itself is gone.

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "tensorpool/memory/memory_stack.hpp"

namespace tp::device {

class StagingPool {
 public:
  // `owner` names the device in stack names and messages; `pinned` false stages through pageable memory.
  static std::shared_ptr<StagingPool> create(std::string owner, bool pinned = true);

  // A block of at least `bytes` (> 0) host bytes, returned to the pool when the last holder drops it.
  std::shared_ptr<void> acquire(std::size_t bytes);
  bool pinned() const noexcept { return pinned_.load(std::memory_order_relaxed); }
  memory::MemoryStats stats() const;

 private:
  StagingPool(std::string owner, bool pinned);
  void fall_back_to_pageable(const std::string& why);

  const std::string owner_;
  mutable std::mutex mutex_;  // guards the switch of stack_ from pinned to pageable
  std::shared_ptr<memory::MemoryStack> stack_;
  std::atomic<bool> pinned_;
};

}  // namespace tp::device

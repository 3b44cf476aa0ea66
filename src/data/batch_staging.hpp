// SPDX-License-Identifier: Apache-2.0
#pragma once
// BatchStaging: the memory batches are assembled in. A memory stack (BFC, growth policy grow, tracked) over
// page-locked host memory, so that the copy of a batch to an accelerator starts from pinned pages. Buffers
// come from Device::allocate(bytes, tag, stack) on a host-accessible device: the device counts and tags
// them, and each returns to the stack it came from (the buffer holds that stack).
//
// Fallback: when the pinned source refuses memory — tp::DeviceError from PinnedHostResource when mlock
// fails, which the BFC layer reports as tp::OutOfMemoryError carrying the refusal — the stack is replaced by
// one over pageable memory (memory::HostResource), one line says so on stderr, and the request is retried
// there; pinned() is false from then on. Batches already handed out keep (and return to) the pinned stack.
// As src/device/staging_pool.cpp does for copies.
//
// On a device that is not host-accessible but has shared memory (Dataset::stage_on an opencl device with
// fine-grained SVM), buffers come from Device::allocate_shared instead: the host assembles batches in memory
// the device's kernels read directly, and the staging stack is not used.
//
// Thread-safe: one mutex guards the switch of stack_.

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "tensorpool/core/buffer.hpp"
#include "tensorpool/memory/memory_stack.hpp"

namespace tp::device {
class Device;
}

namespace tp::data::detail {

class BatchStaging {
 public:
  using SourceFactory = std::function<std::unique_ptr<memory::MemoryResource>()>;

  // `pinned_source` makes the pinned source (default: a memory::PinnedHostResource); a seam for tests,
  // which cannot make mlock fail when running as root.
  explicit BatchStaging(std::string name = "data/staging", const SourceFactory& pinned_source = {});

  // A host-visible buffer of `bytes` on `device`, tagged `tag`: from the staging stack on a host-accessible
  // device, from its shared memory otherwise (tp::InvalidArgument when it has none).
  std::shared_ptr<Buffer> allocate(device::Device& device, std::size_t bytes, const memory::AllocationTag& tag);

  bool pinned() const noexcept { return pinned_.load(std::memory_order_relaxed); }
  memory::MemoryStats stats() const;

 private:
  std::shared_ptr<memory::MemoryStack> stack() const;
  void fall_back_to_pageable(const std::string& why);

  const std::string name_;
  mutable std::mutex mutex_;  // guards the switch of stack_ from pinned to pageable
  std::shared_ptr<memory::MemoryStack> stack_;
  std::atomic<bool> pinned_{true};
};

}  // namespace tp::data::detail

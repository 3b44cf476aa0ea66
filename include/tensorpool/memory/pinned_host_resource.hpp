// SPDX-License-Identifier: Apache-2.0
#pragma once
// PinnedHostResource: page-locked host memory, the staging buffers of host<->device copies.
//
// allocate maps page-rounded anonymous memory (mmap) and locks it (mlock); deallocate unlocks and unmaps.
// When the OS refuses to lock (EPERM / ENOMEM: RLIMIT_MEMLOCK), the mapping is dropped and tp::DeviceError
// is thrown naming the error, the request, the current RLIMIT_MEMLOCK and the fix. Out of address space
// (mmap fails) is a tp::OutOfMemoryError. Stats: in use and reserved are page-rounded bytes, requested the
// callers' sizes; one upstream call per allocate/deallocate. Thread-safe (one mutex guards the stats).

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>

#include "tensorpool/memory/memory_resource.hpp"

namespace tp::memory {

class PinnedHostResource final : public MemoryResource {
 public:
  explicit PinnedHostResource(std::string name = "pinned_host");
  ~PinnedHostResource() override = default;

  // The page size: mappings are page aligned.
  std::size_t max_alignment() const noexcept override;
  std::size_t allocation_granularity() const noexcept override { return page_size_; }

  // The text of the DeviceError thrown when mlock fails (a seam for tests: root cannot be made to fail).
  // `memlock_limit` is the soft RLIMIT_MEMLOCK in bytes, nullopt when unlimited.
  [[nodiscard]] static std::string describe_lock_failure(const std::string& resource_name, int error_number,
                                                         std::size_t requested_bytes, std::size_t mapped_bytes,
                                                         std::optional<std::size_t> memlock_limit);

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;

  std::size_t page_size_;
  mutable std::mutex mutex_;  // guards stats_
  MemoryStats stats_;
};

}  // namespace tp::memory

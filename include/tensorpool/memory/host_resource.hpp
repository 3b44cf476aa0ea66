// SPDX-License-Identifier: Apache-2.0
#pragma once
// HostResource: a source of ordinary host memory (posix_memalign / free).
//
// Every allocate is one upstream call and every deallocate one upstream free, so the stats are exact:
// bytes_in_use == bytes_reserved == bytes_requested == the sum of outstanding requested sizes.
// Alignments up to a page (4096) are honoured. Thread-safe: the counters are guarded by one mutex.

#include <cstddef>
#include <mutex>
#include <string>

#include "tensorpool/memory/memory_resource.hpp"

namespace tp::memory {

class HostResource final : public MemoryResource {
 public:
  explicit HostResource(std::string name = "host");
  ~HostResource() override = default;

  static constexpr std::size_t kMaxAlignment = 4096;
  std::size_t max_alignment() const noexcept override { return kMaxAlignment; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;

  mutable std::mutex mutex_;  // guards stats_
  MemoryStats stats_;
};

}  // namespace tp::memory

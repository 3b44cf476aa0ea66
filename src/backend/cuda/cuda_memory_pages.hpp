// SPDX-License-Identifier: Apache-2.0
#pragma once
// The expandable arena's page source on a CUDA device, split in two so the bookkeeping runs without a GPU:
//   - PageDriver: the calls themselves (CUDA's virtual memory management API in cuda_memory.cpp: reserve =
//     cuMemAddressReserve, create = cuMemCreate, map = cuMemMap + cuMemSetAccess, unmap = cuMemUnmap,
//     release = cuMemRelease; a fake in tests/backend/cuda/internal/);
//   - PagedVirtualMemory: the VirtualMemory the ExpandableArena runs on, over any PageDriver. It holds the
//     host-side bookkeeping: which granule of which reserved range is mapped to which physical handle, the
//     capacity wall (committed + created bytes never exceed it), the rollback of a commit refused half way,
//     and the overlapping copy split into pieces the driver may copy (cudaMemcpy does not allow overlap).
//
// Invariants (under mutex_): committed_ == granularity x (granules mapped by commit + physical handles alive);
// every key of mapped_ lies in a range of ranges_, is granule aligned, and names the handle mapped there;
// a granule mapped by commit() owns its handle (released when unmapped), one mapped by map() borrows it.
// A refused request (out of memory) changes nothing and throws tp::OutOfMemoryError with the usual report.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "tensorpool/memory/virtual_memory.hpp"

namespace tp::backend::cuda {

class PageDriver {
 public:
  virtual ~PageDriver() = default;
  // The physical page size (a power of two); fixed for the driver's life.
  [[nodiscard]] virtual std::size_t granularity() const noexcept = 0;
  // `bytes` (a multiple of granularity()) of address space aligned to granularity(); throws tp::DeviceError.
  [[nodiscard]] virtual std::uintptr_t reserve(std::size_t bytes) = 0;
  virtual void free_reservation(std::uintptr_t base, std::size_t bytes) noexcept = 0;
  // One page of physical memory; std::nullopt when the device is out of memory, tp::DeviceError otherwise.
  [[nodiscard]] virtual std::optional<std::uint64_t> create() = 0;
  virtual void release(std::uint64_t handle) noexcept = 0;
  // Maps the page `handle` at `address` readable and writable by the device; false when out of memory
  // (nothing is mapped then), tp::DeviceError for another failure.
  [[nodiscard]] virtual bool map(std::uintptr_t address, std::uint64_t handle) = 0;
  virtual void unmap(std::uintptr_t address) noexcept = 0;
  // Copies between mapped places that do not overlap, complete when it returns.
  virtual void copy_disjoint(void* to, const void* from, std::size_t bytes) noexcept = 0;
  // Words for an out-of-memory report (e.g. "cuMemCreate refused a 2 MiB page on cuda:0").
  [[nodiscard]] virtual std::string describe_refusal(const char* call) const = 0;
};

class PagedVirtualMemory final : public memory::VirtualMemory {
 public:
  // Throws tp::InvalidArgument when the driver's granularity is not a power of two or capacity is 0.
  PagedVirtualMemory(std::unique_ptr<PageDriver> driver, std::string name, std::optional<std::size_t> capacity);
  ~PagedVirtualMemory() override;
  PagedVirtualMemory(const PagedVirtualMemory&) = delete;
  PagedVirtualMemory& operator=(const PagedVirtualMemory&) = delete;

  const std::string& name() const noexcept override { return name_; }
  std::size_t granularity() const noexcept override { return granularity_; }
  std::optional<std::size_t> capacity() const noexcept override { return capacity_; }
  std::size_t committed_bytes() const noexcept override;

  // Throws tp::InvalidArgument for a size that is 0 or not a multiple of granularity().
  [[nodiscard]] void* reserve(std::size_t bytes) override;
  // Unmaps whatever is still mapped in the range (releasing the pages commit() made) before freeing it.
  void unreserve(void* base, std::size_t bytes) noexcept override;
  // Granules already mapped are left as they are. Throws tp::InvalidArgument for a range that is not granule
  // aligned or not inside one reserved range.
  void commit(void* ptr, std::size_t bytes) override;
  // Granules mapped by commit() are unmapped and released; granules mapped by map() are unmapped only.
  void decommit(void* ptr, std::size_t bytes) noexcept override;
  [[nodiscard]] PhysicalHandle create_physical() override;
  void release_physical(PhysicalHandle handle) noexcept override;
  // Whatever was mapped at `ptr` is unmapped first (a page commit() made is released). When the driver
  // refuses, the granule stays unmapped (CUDA cannot map over a mapping, so the old one is gone).
  void map(void* ptr, PhysicalHandle handle) override;
  void unmap(void* ptr) noexcept override;
  // memmove semantics over the driver's disjoint copy: overlapping ranges are copied in pieces no longer
  // than the distance between them, front to back when moving down, back to front when moving up.
  void copy(void* to, const void* from, std::size_t bytes) noexcept override;

  // For tests: granules mapped now, and physical pages alive (commit()'s and create_physical()'s).
  [[nodiscard]] std::size_t mapped_granules() const;
  [[nodiscard]] std::size_t live_pages() const;

 private:
  struct Mapping {
    std::uint64_t handle = 0;
    bool owned = false;  // made by commit(): released when unmapped
  };
  // Throws tp::InvalidArgument unless [address, address + bytes) is granule aligned and in one reserved range.
  void check_range(std::uintptr_t address, std::size_t bytes, const char* operation) const;
  bool take(std::size_t bytes) noexcept;
  // Unmaps the granule at `address` when mapped, releasing an owned page. Holds mutex_.
  void unmap_locked(std::uintptr_t address) noexcept;
  [[noreturn]] void refuse(std::size_t bytes, const std::string& detail);

  const std::unique_ptr<PageDriver> driver_;
  const std::string name_;
  const std::optional<std::size_t> capacity_;
  const std::size_t granularity_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> ranges_;  // base -> bytes
  std::map<std::uintptr_t, Mapping> mapped_;      // granule address -> what is mapped there
  std::set<std::uint64_t> physical_;              // handles from create_physical()
  std::atomic<std::size_t> committed_{0};         // written under mutex_, read without it
  std::size_t owned_pages_ = 0;
};

}  // namespace tp::backend::cuda

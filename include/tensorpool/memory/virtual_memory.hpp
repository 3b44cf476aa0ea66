// SPDX-License-Identifier: Apache-2.0
#pragma once
// VirtualMemory: a physical-memory source that can back a reserved address range page by page, the way
// CUDA's VMM (cuMemAddressReserve + cuMemMap) or mmap(PROT_NONE) + mprotect do. The ExpandableArena is
// built on it. Only committed bytes count against the capacity; reserved address space is free.
//
// Two ways to back a range: commit/decommit make a granule's own pages accessible in place; physical
// granules (create_physical/map/unmap/release_physical) are memory with a handle, mapped at one or more
// granule-aligned places of reserved ranges at once (memfd_create + mmap(MAP_SHARED | MAP_FIXED) on the host,
// cuMemCreate + cuMemMap on CUDA): bytes written through one mapping are read through every other.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace tp::memory {

class VirtualMemory {
 public:
  virtual ~VirtualMemory() = default;

  [[nodiscard]] virtual const std::string& name() const noexcept = 0;
  // Commit/decommit unit; reserve sizes and commit offsets are multiples of it.
  [[nodiscard]] virtual std::size_t granularity() const noexcept = 0;
  // Hard wall on committed bytes, if any.
  [[nodiscard]] virtual std::optional<std::size_t> capacity() const noexcept = 0;
  [[nodiscard]] virtual std::size_t committed_bytes() const noexcept = 0;

  // Address space only: nothing is committed. Throws tp::DeviceError when the OS refuses.
  [[nodiscard]] virtual void* reserve(std::size_t bytes) = 0;
  virtual void unreserve(void* base, std::size_t bytes) noexcept = 0;
  // Backs [ptr, ptr + bytes) with memory. Throws tp::OutOfMemoryError when the capacity would be exceeded
  // or the OS refuses; nothing is committed then.
  virtual void commit(void* ptr, std::size_t bytes) = 0;
  // Gives the pages back; their contents are lost.
  virtual void decommit(void* ptr, std::size_t bytes) noexcept = 0;

  using PhysicalHandle = std::uint64_t;
  // One granule of physical memory, counted in committed_bytes() and against the capacity until released.
  // Throws tp::OutOfMemoryError when the capacity would be exceeded or the OS refuses.
  [[nodiscard]] virtual PhysicalHandle create_physical() = 0;
  // Gives the granule's memory back; every mapping of it must have been unmapped.
  virtual void release_physical(PhysicalHandle handle) noexcept = 0;
  // Maps the granule at `ptr` (granule aligned, inside a reserved range), replacing whatever was mapped
  // there, readable and writable. Throws tp::OutOfMemoryError when the OS refuses (nothing changes then).
  virtual void map(void* ptr, PhysicalHandle handle) = 0;
  // Makes the granule at `ptr` reserved address space again (inaccessible); the physical memory stays.
  virtual void unmap(void* ptr) noexcept = 0;
  // Copies `bytes` between two mapped places of reserved ranges (they may overlap), as compaction moves a
  // block. The default is a host memmove, right for host-mapped memory (host and simulated devices); a
  // device whose mappings the host cannot read overrides it with a device copy.
  virtual void copy(void* to, const void* from, std::size_t bytes) noexcept { std::memmove(to, from, bytes); }
};

}  // namespace tp::memory

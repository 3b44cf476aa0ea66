// SPDX-License-Identifier: Apache-2.0
#pragma once
// A host VirtualMemory that counts map() calls: each is a system call (mmap) on the host, so the arena tests
// that check which cached granule a placement takes count them.

#include <cstddef>
#include <optional>
#include <string>

#include "tensorpool/memory/host_virtual_memory.hpp"
#include "tensorpool/memory/virtual_memory.hpp"

namespace tp::memory::testing {

class MapCountingMemory final : public VirtualMemory {
 public:
  const std::string& name() const noexcept override { return inner_.name(); }
  std::size_t granularity() const noexcept override { return inner_.granularity(); }
  std::optional<std::size_t> capacity() const noexcept override { return inner_.capacity(); }
  std::size_t committed_bytes() const noexcept override { return inner_.committed_bytes(); }
  void* reserve(std::size_t bytes) override { return inner_.reserve(bytes); }
  void unreserve(void* base, std::size_t bytes) noexcept override { inner_.unreserve(base, bytes); }
  void commit(void* ptr, std::size_t bytes) override { inner_.commit(ptr, bytes); }
  void decommit(void* ptr, std::size_t bytes) noexcept override { inner_.decommit(ptr, bytes); }
  PhysicalHandle create_physical() override { return inner_.create_physical(); }
  void release_physical(PhysicalHandle handle) noexcept override { inner_.release_physical(handle); }
  void map(void* ptr, PhysicalHandle handle) override {
    ++maps;
    inner_.map(ptr, handle);
  }
  void unmap(void* ptr) noexcept override { inner_.unmap(ptr); }

  std::size_t maps = 0;

 private:
  HostVirtualMemory inner_;
};

}  // namespace tp::memory::testing

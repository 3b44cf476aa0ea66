// SPDX-License-Identifier: Apache-2.0
#pragma once
// ResourceAdaptor: the base of the one-concern wrappers (limiting, statistics, tracking, failure callback).
// It holds the upstream, owned through a std::unique_ptr or borrowed through a reference, and forwards
// everything an adaptor does not change: allocate (with its AllocationTag), deallocate, trim, stats,
// reset_peak, max_alignment and the allocated sizes. A derived adaptor overrides only the hooks its concern touches.
//
// Invariant: upstream_ refers to a live resource for the adaptor's whole life; when owned_upstream_ is set,
// upstream_ refers to it.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "tensorpool/memory/memory_resource.hpp"

namespace tp::memory {

class ResourceAdaptor : public MemoryResource {
 public:
  MemoryResource& upstream() noexcept { return upstream_; }
  const MemoryResource& upstream() const noexcept { return upstream_; }
  // The upstream's, read once (a resource's maximum alignment never changes): an adaptor accepts exactly the
  // alignments its upstream does, which is what lets it forward requests without validating them again.
  std::size_t max_alignment() const noexcept final { return max_alignment_; }
  std::size_t allocation_granularity() const noexcept override { return upstream_.allocation_granularity(); }
  std::optional<std::size_t> fixed_allocated_size(std::size_t bytes) const noexcept override {
    return upstream_.fixed_allocated_size(bytes);
  }

 protected:
  // Owns the upstream; throws tp::InvalidArgument naming this adaptor when it is null.
  ResourceAdaptor(std::unique_ptr<MemoryResource> upstream, std::string name);
  // Borrows the upstream, which must outlive this adaptor.
  ResourceAdaptor(MemoryResource& upstream, std::string name);

  // Hand a request this adaptor's allocate() validated (or a non-null pointer) to the upstream without
  // validating it again (MemoryResource::allocate_validated): what a derived adaptor's hooks call.
  void* upstream_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
    return allocate_validated(upstream_, bytes, alignment, tag);
  }
  void upstream_deallocate(void* ptr, std::size_t bytes) noexcept { deallocate_validated(upstream_, ptr, bytes); }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  std::size_t do_trim() override;
  CompactionResult do_compact(Relocator& relocator) override;
  MemoryStats do_stats() const override;
  void do_reset_peak() override;
  std::size_t do_allocated_size(const void* ptr, std::size_t bytes) const noexcept override;

  // Immutable after construction.
  std::unique_ptr<MemoryResource> owned_upstream_;  // null when borrowed
  MemoryResource& upstream_;
  const std::size_t max_alignment_;
};

}  // namespace tp::memory

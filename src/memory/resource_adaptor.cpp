// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/resource_adaptor.hpp"

#include <utility>

#include "tensorpool/core/error.hpp"

namespace tp::memory {
namespace {

MemoryResource& checked(const std::unique_ptr<MemoryResource>& upstream, const std::string& name) {
  if (upstream == nullptr) {
    TP_THROW(InvalidArgument, "memory", name, ": the upstream resource is null; pass the resource to wrap");
  }
  return *upstream;
}

}  // namespace

ResourceAdaptor::ResourceAdaptor(std::unique_ptr<MemoryResource> upstream, std::string name)
    : MemoryResource(std::move(name)),
      owned_upstream_(std::move(upstream)),
      upstream_(checked(owned_upstream_, this->name())),
      max_alignment_(upstream_.max_alignment()) {}

ResourceAdaptor::ResourceAdaptor(MemoryResource& upstream, std::string name)
    : MemoryResource(std::move(name)), upstream_(upstream), max_alignment_(upstream_.max_alignment()) {}

void* ResourceAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
  return upstream_allocate(bytes, alignment, tag);
}

void ResourceAdaptor::do_deallocate(void* ptr, std::size_t bytes) noexcept { upstream_deallocate(ptr, bytes); }

std::size_t ResourceAdaptor::do_trim() { return upstream_.trim(); }

CompactionResult ResourceAdaptor::do_compact(Relocator& relocator) { return upstream_.compact(relocator); }

MemoryStats ResourceAdaptor::do_stats() const { return upstream_.stats(); }

void ResourceAdaptor::do_reset_peak() { upstream_.reset_peak(); }

std::size_t ResourceAdaptor::do_allocated_size(const void* ptr, std::size_t bytes) const noexcept {
  return upstream_.allocated_size(ptr, bytes);
}

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/cuda_memory_pages.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/memory_resource.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::backend::cuda {

PagedVirtualMemory::PagedVirtualMemory(std::unique_ptr<PageDriver> driver, std::string name,
                                       std::optional<std::size_t> capacity)
    : driver_(std::move(driver)),
      name_(std::move(name)),
      capacity_(capacity),
      granularity_(driver_ != nullptr ? driver_->granularity() : 0) {
  if (driver_ == nullptr || !memory::is_power_of_two(granularity_)) {
    TP_THROW(InvalidArgument, "memory", name_, ": the page driver's granularity (", granularity_,
             " bytes) is not a power of two");
  }
  if (capacity_.has_value() && *capacity_ == 0) {
    TP_THROW(InvalidArgument, "memory", name_, ": capacity = 0; a device needs memory");
  }
}

PagedVirtualMemory::~PagedVirtualMemory() {
  // The arena gives everything back before it goes; anything left is unmapped and freed here, so the device's
  // memory is not lost with the object.
  std::lock_guard lock(mutex_);
  while (!mapped_.empty()) unmap_locked(mapped_.begin()->first);
  for (const std::uint64_t handle : physical_) driver_->release(handle);
  for (const auto& [base, bytes] : ranges_) driver_->free_reservation(base, bytes);
}

std::size_t PagedVirtualMemory::committed_bytes() const noexcept { return committed_.load(std::memory_order_relaxed); }

std::size_t PagedVirtualMemory::mapped_granules() const {
  std::lock_guard lock(mutex_);
  return mapped_.size();
}

std::size_t PagedVirtualMemory::live_pages() const {
  std::lock_guard lock(mutex_);
  return owned_pages_ + physical_.size();
}

void* PagedVirtualMemory::reserve(std::size_t bytes) {
  if (bytes == 0 || bytes % granularity_ != 0) {
    TP_THROW(InvalidArgument, "memory", name_, ": reserve of ", bytes, " bytes is not a positive multiple of the ",
             format_bytes(granularity_), " page granularity; round the size up to it");
  }
  const std::uintptr_t base = driver_->reserve(bytes);
  std::lock_guard lock(mutex_);
  ranges_.emplace(base, bytes);
  return reinterpret_cast<void*>(base);  // NOLINT(performance-no-int-to-ptr): the driver's device address
}

void PagedVirtualMemory::unreserve(void* base, std::size_t bytes) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(base);
  std::lock_guard lock(mutex_);
  const auto range = ranges_.find(address);
  if (range == ranges_.end()) return;
  const std::uintptr_t end = address + range->second;
  for (auto it = mapped_.lower_bound(address); it != mapped_.end() && it->first < end;) {
    const std::uintptr_t granule = it->first;
    ++it;
    unmap_locked(granule);
  }
  driver_->free_reservation(address, std::max(bytes, range->second));
  ranges_.erase(range);
}

void PagedVirtualMemory::check_range(std::uintptr_t address, std::size_t bytes, const char* operation) const {
  const bool aligned = address % granularity_ == 0 && bytes % granularity_ == 0;
  auto range = ranges_.upper_bound(address);
  const bool inside = range != ranges_.begin() && (--range, address + bytes <= range->first + range->second);
  if (!aligned || !inside) {
    TP_THROW(InvalidArgument, "memory", name_, ": ", operation, " of [0x", std::hex, address, ", +", std::dec, bytes,
             ") is not ", aligned ? "inside one reserved range" : "aligned to the page granularity", " (",
             format_bytes(granularity_), "); pass granule-aligned ranges from reserve()");
  }
}

bool PagedVirtualMemory::take(std::size_t bytes) noexcept {
  const std::size_t used = committed_.load(std::memory_order_relaxed);
  if (capacity_.has_value() && (used > *capacity_ || bytes > *capacity_ - used)) return false;
  committed_.store(used + bytes, std::memory_order_relaxed);
  return true;
}

void PagedVirtualMemory::refuse(std::size_t bytes, const std::string& detail) {
  const std::size_t used = committed_.load(std::memory_order_relaxed);
  auto report = OutOfMemoryReport::for_request(name_, bytes, bytes, {}, capacity_, used, used);
  report.largest_free_block = capacity_.has_value() && *capacity_ > used ? *capacity_ - used : 0;
  report.detail = detail;
  throw OutOfMemoryError(std::move(report));
}

void PagedVirtualMemory::unmap_locked(std::uintptr_t address) noexcept {
  const auto it = mapped_.find(address);
  if (it == mapped_.end()) return;
  driver_->unmap(address);
  if (it->second.owned) {
    driver_->release(it->second.handle);
    --owned_pages_;
    committed_.fetch_sub(granularity_, std::memory_order_relaxed);
  }
  mapped_.erase(it);
}

void PagedVirtualMemory::commit(void* ptr, std::size_t bytes) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(mutex_);
  check_range(address, bytes, "commit");
  std::vector<std::uintptr_t> done;  // granules this call mapped: unmapped again when a later one is refused
  const auto roll_back = [&]() noexcept {
    for (const std::uintptr_t granule : done) unmap_locked(granule);
  };
  for (std::uintptr_t granule = address; granule < address + bytes; granule += granularity_) {
    if (mapped_.contains(granule)) continue;
    if (!take(granularity_)) {
      roll_back();
      refuse(bytes, name_ + ": committing " + format_bytes(bytes) + " would exceed the capacity of " +
                        format_bytes(capacity_.value_or(0)) + " (" + format_bytes(committed_bytes()) + " committed)");
    }
    std::optional<std::uint64_t> handle;
    try {
      handle = driver_->create();
      if (handle.has_value() && !driver_->map(granule, *handle)) {
        driver_->release(*handle);
        handle.reset();
        committed_.fetch_sub(granularity_, std::memory_order_relaxed);
        roll_back();
        refuse(bytes, driver_->describe_refusal("cuMemMap"));
      }
    } catch (const OutOfMemoryError&) {
      throw;
    } catch (...) {  // a driver failure: the page taken for this granule and the granules before it go back
      if (handle.has_value()) driver_->release(*handle);
      committed_.fetch_sub(granularity_, std::memory_order_relaxed);
      roll_back();
      throw;
    }
    if (!handle.has_value()) {
      committed_.fetch_sub(granularity_, std::memory_order_relaxed);
      roll_back();
      refuse(bytes, driver_->describe_refusal("cuMemCreate"));
    }
    mapped_.emplace(granule, Mapping{*handle, true});
    ++owned_pages_;
    done.push_back(granule);
  }
}

void PagedVirtualMemory::decommit(void* ptr, std::size_t bytes) noexcept {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(mutex_);
  for (auto it = mapped_.lower_bound(address); it != mapped_.end() && it->first < address + bytes;) {
    const std::uintptr_t granule = it->first;
    ++it;
    unmap_locked(granule);
  }
}

memory::VirtualMemory::PhysicalHandle PagedVirtualMemory::create_physical() {
  std::lock_guard lock(mutex_);
  if (!take(granularity_)) {
    refuse(granularity_, name_ + ": a physical page of " + format_bytes(granularity_) +
                             " would exceed the capacity of " + format_bytes(capacity_.value_or(0)) + " (" +
                             format_bytes(committed_bytes()) + " committed)");
  }
  std::optional<std::uint64_t> handle;
  try {
    handle = driver_->create();
  } catch (...) {
    committed_.fetch_sub(granularity_, std::memory_order_relaxed);
    throw;
  }
  if (!handle.has_value()) {
    committed_.fetch_sub(granularity_, std::memory_order_relaxed);
    refuse(granularity_, driver_->describe_refusal("cuMemCreate"));
  }
  physical_.insert(*handle);
  return *handle;
}

void PagedVirtualMemory::release_physical(PhysicalHandle handle) noexcept {
  std::lock_guard lock(mutex_);
  if (physical_.erase(handle) == 0) return;
  driver_->release(handle);
  committed_.fetch_sub(granularity_, std::memory_order_relaxed);
}

void PagedVirtualMemory::map(void* ptr, PhysicalHandle handle) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard lock(mutex_);
  check_range(address, granularity_, "map");
  if (!physical_.contains(handle)) {
    TP_THROW(InvalidArgument, "memory", name_, ": map of handle ", handle,
             ", which create_physical() did not return or which was released");
  }
  unmap_locked(address);
  if (!driver_->map(address, handle)) refuse(granularity_, driver_->describe_refusal("cuMemMap"));
  mapped_.emplace(address, Mapping{handle, false});
}

void PagedVirtualMemory::unmap(void* ptr) noexcept {
  std::lock_guard lock(mutex_);
  unmap_locked(reinterpret_cast<std::uintptr_t>(ptr));
}

void PagedVirtualMemory::copy(void* to, const void* from, std::size_t bytes) noexcept {
  auto* destination = static_cast<unsigned char*>(to);
  const auto* source = static_cast<const unsigned char*>(from);
  if (bytes == 0 || destination == source) return;
  const std::size_t distance = destination > source ? static_cast<std::size_t>(destination - source)
                                                    : static_cast<std::size_t>(source - destination);
  if (distance >= bytes) {
    driver_->copy_disjoint(destination, source, bytes);
    return;
  }
  // Overlap: each piece's source is read before a later piece's destination overwrites it, because pieces no
  // longer than `distance` are taken from the side the move goes toward.
  if (destination < source) {
    for (std::size_t offset = 0; offset < bytes; offset += distance) {
      driver_->copy_disjoint(destination + offset, source + offset, std::min(distance, bytes - offset));
    }
  } else {
    for (std::size_t end = bytes; end > 0;) {
      const std::size_t piece = std::min(distance, end);
      end -= piece;
      driver_->copy_disjoint(destination + end, source + end, piece);
    }
  }
}

}  // namespace tp::backend::cuda

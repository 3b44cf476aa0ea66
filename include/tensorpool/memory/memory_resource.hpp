// SPDX-License-Identifier: Apache-2.0
#pragma once
// MemoryResource: the one interface every source, allocator and adaptor implements.
//
// Non-virtual interface: allocate/deallocate validate arguments once, here, and call the private hooks.
// Contract for every implementation:
//   - allocate returns a pointer aligned to `alignment` with at least `bytes` usable bytes, or throws
//     tp::OutOfMemoryError (a std::bad_alloc) and stays consistent and usable;
//   - deallocate(ptr, bytes) takes back exactly a pointer this resource returned with the same `bytes`;
//     it never throws;
//   - stats(), trim() and reset_peak() are thread-safe, as are allocate/deallocate.
// Adaptors own their upstream when constructed from a std::unique_ptr and borrow it when given a reference.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "tensorpool/memory/allocation_tag.hpp"
#include "tensorpool/memory/compaction.hpp"
#include "tensorpool/memory/memory_stats.hpp"

namespace tp::memory {

// Alignment used when a caller does not ask for one; also the granularity of the sub-allocators.
inline constexpr std::size_t kDefaultAlignment = 256;

// The largest size any resource accepts: rounding it up to a page or a 2 MiB granule must not overflow.
inline constexpr std::size_t kMaxAllocationBytes = std::size_t{1} << 56;

// Rounds `value` up to a multiple of `multiple` (a power of two). Caller guarantees no overflow.
[[nodiscard]] constexpr std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
  return (value + multiple - 1) & ~(multiple - 1);
}

[[nodiscard]] constexpr bool is_power_of_two(std::size_t value) noexcept {
  return value != 0 && (value & (value - 1)) == 0;
}

class MemoryResource {
 public:
  explicit MemoryResource(std::string name) : name_(std::move(name)) {}
  virtual ~MemoryResource() = default;
  MemoryResource(const MemoryResource&) = delete;
  MemoryResource& operator=(const MemoryResource&) = delete;

  // Throws tp::InvalidArgument for bytes == 0, an alignment that is not a power of two or exceeds
  // max_alignment(), or a size that overflows when rounded; tp::OutOfMemoryError when memory runs out.
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = kDefaultAlignment,
                               const AllocationTag& tag = {}) {
    if (bytes == 0 || bytes > kMaxAllocationBytes || !is_power_of_two(alignment) || alignment > max_alignment())
        [[unlikely]] {
      reject(bytes, alignment, tag);
    }
    return do_allocate(bytes, alignment, tag);
  }
  // ptr == nullptr is a no-op. `bytes` must be the size passed to allocate.
  void deallocate(void* ptr, std::size_t bytes) noexcept {
    if (ptr != nullptr) do_deallocate(ptr, bytes);
  }

  // Returns cached free memory to the source; the number of bytes given back.
  std::size_t trim() { return do_trim(); }
  // Moves live blocks that `relocator` lets move so that the memory their holes pin goes back (compaction.hpp).
  // The caller guarantees that nothing reads or writes those blocks meanwhile. Only the expandable arena moves
  // blocks; elsewhere nothing moves and the result has ran = false. Adaptors forward it; an adaptor that keys
  // records by address moves them with their blocks.
  CompactionResult compact(Relocator& relocator) { return do_compact(relocator); }
  [[nodiscard]] MemoryStats stats() const { return do_stats(); }
  // Peaks restart from the current values (in use, reserved, requested).
  void reset_peak() { do_reset_peak(); }
  // What the allocator really set aside for a live allocation of `bytes` at `ptr` (its chunk or block after
  // rounding; `bytes` where the resource does not round). Per-tensor accounting reports it next to `bytes`.
  [[nodiscard]] std::size_t allocated_size(const void* ptr, std::size_t bytes) const noexcept {
    return do_allocated_size(ptr, bytes);
  }

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  // Largest alignment allocate() honours.
  [[nodiscard]] virtual std::size_t max_alignment() const noexcept { return kDefaultAlignment; }
  // Requests are served in whole units of this many bytes: a request of n takes n rounded up to it.
  [[nodiscard]] virtual std::size_t allocation_granularity() const noexcept { return 1; }
  // The size allocated_size() reports for every live allocation of `bytes`, when it depends on `bytes` alone,
  // so a caller can know it without a look-up (which may take the resource's lock); std::nullopt when it
  // depends on the block (BFC hands a chunk out whole below twice the request) or the resource does not say.
  [[nodiscard]] virtual std::optional<std::size_t> fixed_allocated_size(std::size_t /*bytes*/) const noexcept {
    return std::nullopt;
  }

  // A block and what the resource set aside for it (allocated_size() of the block).
  struct SizedAllocation {
    void* ptr = nullptr;
    std::size_t allocated = 0;
  };

 protected:
  // For a layer handing a request its own allocate() has validated to the resource below it, whose
  // max_alignment() is at least this layer's (so the checks would pass again): calls the hook directly, so a
  // stack validates each request once, at its top, not once per layer.
  static void* allocate_validated(MemoryResource& below, std::size_t bytes, std::size_t alignment,
                                  const AllocationTag& tag) {
    return below.do_allocate(bytes, alignment, tag);
  }
  // allocate_validated, also giving the block's allocated_size(): from the allocation itself where the
  // resource overrides do_allocate_sized (BFC knows its chunk then), saving a look-up under its lock.
  static SizedAllocation allocate_sized_validated(MemoryResource& below, std::size_t bytes, std::size_t alignment,
                                                  const AllocationTag& tag) {
    return below.do_allocate_sized(bytes, alignment, tag);
  }
  // `ptr` is not null (deallocate() returned early for it).
  static void deallocate_validated(MemoryResource& below, void* ptr, std::size_t bytes) noexcept {
    below.do_deallocate(ptr, bytes);
  }
  // deallocate_validated, also taking the block's footprint (allocated_size(), at least `bytes` rounded up to
  // allocation_granularity()) off `in_use` before the block can be handed out again, so a counter of what
  // callers hold never counts a block twice, even for an instant: in one step under the lock where the
  // resource overrides do_deallocate_releasing (BFC finds the chunk then), saving a look-up under its lock.
  static void deallocate_releasing_validated(MemoryResource& below, void* ptr, std::size_t bytes,
                                             std::atomic<std::size_t>& in_use) noexcept {
    below.do_deallocate_releasing(ptr, bytes, in_use);
  }

 private:
  // Throws the tp::InvalidArgument allocate() documents, for the first check the request fails; kept out of
  // line so the checks that pass cost a few compares.
  [[noreturn, gnu::cold]] void reject(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) const;

  virtual void* do_allocate(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) = 0;
  virtual void do_deallocate(void* ptr, std::size_t bytes) noexcept = 0;
  virtual std::size_t do_trim() { return 0; }
  virtual CompactionResult do_compact(Relocator& /*relocator*/) { return {}; }
  virtual MemoryStats do_stats() const = 0;
  virtual void do_reset_peak() {}
  virtual std::size_t do_allocated_size(const void* /*ptr*/, std::size_t bytes) const noexcept { return bytes; }
  // do_allocate, then do_allocated_size, unless the resource knows the size as it allocates.
  virtual SizedAllocation do_allocate_sized(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) {
    void* ptr = do_allocate(bytes, alignment, tag);
    return SizedAllocation{ptr, do_allocated_size(ptr, bytes)};
  }
  // do_allocated_size (the footprint, see deallocate_releasing_validated), then do_deallocate, unless the
  // resource finds the size as it frees.
  virtual void do_deallocate_releasing(void* ptr, std::size_t bytes, std::atomic<std::size_t>& in_use) noexcept {
    in_use.fetch_sub(std::max(do_allocated_size(ptr, bytes), round_up(bytes, allocation_granularity())),
                     std::memory_order_relaxed);
    do_deallocate(ptr, bytes);
  }

  std::string name_;
};

}  // namespace tp::memory

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/memory/memory_resource.hpp"

#include "tensorpool/core/error.hpp"

namespace tp::memory {

void MemoryResource::reject(std::size_t bytes, std::size_t alignment, const AllocationTag& tag) const {
  if (bytes == 0) {
    TP_THROW(InvalidArgument, "memory", name_, ": allocate(bytes = 0) for ", tag.describe(),
             "; request at least 1 byte (zero-element tensors need no allocation)");
  }
  if (!is_power_of_two(alignment)) {
    TP_THROW(InvalidArgument, "memory", name_, ": alignment = ", alignment,
             " is not a power of two; use 1, 2, 4, ..., ", max_alignment());
  }
  if (alignment > max_alignment()) {
    TP_THROW(InvalidArgument, "memory", name_, ": alignment = ", alignment, " exceeds this resource's maximum of ",
             max_alignment(), "; request at most ", max_alignment());
  }
  TP_THROW(InvalidArgument, "memory", name_, ": bytes = ", bytes, " overflows when rounded (maximum ",
           kMaxAllocationBytes, "); the size was probably computed from a negative or overflowed count");
}

}  // namespace tp::memory

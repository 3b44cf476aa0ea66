// SPDX-License-Identifier: Apache-2.0
#pragma once
// QuotaAdaptor: one client's (session's) view of a device's memory stack shared through a MemoryArbiter.
// Every allocation goes to the upstream first (only it knows the rounded size), then is reserved with the
// arbiter at upstream.allocated_size(ptr, bytes); a refused reservation gives the memory back to the
// upstream before this call returns and throws tp::OutOfMemoryError naming the client, its quota and
// reservation, the arbiter's budget and total reservation, with a hint (raise the quota, smaller batch,
// close other sessions). deallocate releases the reservation, then frees upstream.
//
// Ownership: the upstream is borrowed (a device's stack, shared by every client's adaptor) and must outlive
// the adaptor; the ArbiterClient is owned, so destroying the adaptor unregisters the client and returns
// whatever it still holds to the budget at once. Free the client's allocations before that: memory handed
// out stays in the upstream and is then no longer counted against any client.
//
// stats(): the client's view where one exists, the device's elsewhere:
//   client: bytes_in_use (= its reservation) and its peak, bytes_requested and its peak, num_allocs,
//           num_frees, largest_alloc, num_ooms (its refusals + upstream OOMs it passed on), bytes_limit
//           (min of its quota and the upstream's limit), largest_free_block (the upstream's, capped by what
//           the quota and the budget still allow);
//   device: bytes_reserved and its peak, num_retries, upstream_allocs, upstream_frees, num_compactions,
//           bytes_compacted.
// reset_peak() restarts the client's peaks only; the device's peaks belong to the device's owner.
//
// Invariant: counters_.bytes_in_use == the client's reservation with the arbiter == the sum of
// allocated_size of this adaptor's live allocations. Thread-safe: the arbiter serialises reservations;
// mutex_ guards counters_ and is never held while calling the upstream or the arbiter.

#include <cstddef>
#include <mutex>
#include <string>

#include "tensorpool/arbiter/arbiter_client.hpp"
#include "tensorpool/arbiter/memory_arbiter.hpp"
#include "tensorpool/memory/memory_stats.hpp"
#include "tensorpool/memory/resource_adaptor.hpp"

namespace tp::arbiter {

class QuotaAdaptor final : public memory::ResourceAdaptor {
 public:
  // Takes over `client` (throws tp::InvalidArgument when it is not registered). An empty `name` becomes
  // "quota:<client name>".
  QuotaAdaptor(memory::MemoryResource& upstream, ArbiterClient client, std::string name = {});
  // Registers `client_name` with `quota_bytes` on `arbiter` (which must outlive the adaptor).
  QuotaAdaptor(memory::MemoryResource& upstream, MemoryArbiter& arbiter, std::string client_name,
               std::size_t quota_bytes);

  const ArbiterClient& client() const noexcept { return client_; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment, const memory::AllocationTag& tag) override;
  void do_deallocate(void* ptr, std::size_t bytes) noexcept override;
  memory::MemoryStats do_stats() const override;
  void do_reset_peak() override;
  [[noreturn]] void refuse(std::size_t requested, std::size_t charged, const memory::AllocationTag& tag,
                           const ReserveRefusal& refusal);
  // The device name for reports: the upstream stack's device, or empty.
  std::string device_name() const;

  ArbiterClient client_;      // immutable after construction (its calls are thread-safe)
  mutable std::mutex mutex_;  // guards counters_
  memory::MemoryStats counters_;
};

}  // namespace tp::arbiter

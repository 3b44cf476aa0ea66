// SPDX-License-Identifier: Apache-2.0
#pragma once
// MemoryArbiter: one device's memory budget shared by several clients (sessions in one process, or processes
// on one machine). Each client registers with a quota; the arbiter grants reservations so that
//
//   for every client c:   c.reserved <= c.quota            (a quota caps one client)
//   sum over clients:     sum(c.reserved) <= budget         (the budget caps all of them together)
//
// Quotas may over-commit the budget (sum(quota) > budget is allowed): a quota is a ceiling, not a promise, so
// an idle client's share is usable by the others. A reservation is only bookkeeping: the memory itself comes
// from the device's memory stack (QuotaAdaptor ties the two together).
//
// Non-virtual interface, as MemoryResource: the public calls validate once, here, and forward to private
// hooks. Every implementation is thread-safe. Implementations: InProcessArbiter (a mutex) and
// SharedMemoryArbiter (POSIX shared memory, several processes).
//
// Errors: a quota of 0 or above the budget, an empty name, or an id that is not (or no longer) registered
// throw tp::InvalidArgument; release() and unregister_client() never throw and ignore such ids.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tp::arbiter {

// Names one registration. `generation` is unique per registration within an arbiter, so an id kept after
// unregister_client() (or after a dead process's slot was reclaimed and reused) is never mistaken for the
// slot's next owner.
struct ClientId {
  static constexpr std::uint32_t kInvalidSlot = 0xffffffffu;
  std::uint32_t slot = kInvalidSlot;
  std::uint64_t generation = 0;

  bool valid() const noexcept { return slot != kInvalidSlot; }
  friend bool operator==(const ClientId&, const ClientId&) = default;
};

// One client as the arbiter sees it at one moment.
struct ClientUsage {
  ClientId id;
  std::string name;                // as registered, e.g. "session-1"
  std::size_t quota_bytes = 0;     // ceiling on reserved_bytes
  std::size_t reserved_bytes = 0;  // granted and not yet released
  std::size_t peak_bytes = 0;      // highest reserved_bytes since registration
  std::int64_t process_id = 0;     // the process that registered it
};

// The arbiter's state when it refused a reservation, taken under its lock (so it explains that refusal).
struct ReserveRefusal {
  ClientUsage client;  // the refused client, before the request
  std::size_t budget_bytes = 0;
  std::size_t reserved_bytes = 0;  // sum over all clients, before the request
  bool over_quota = false;         // the request would take the client past its quota
  bool over_budget = false;        // the request would take the sum past the budget
};

class MemoryArbiter {
 public:
  virtual ~MemoryArbiter() = default;
  MemoryArbiter(const MemoryArbiter&) = delete;
  MemoryArbiter& operator=(const MemoryArbiter&) = delete;

  // Throws tp::InvalidArgument for an empty name, quota_bytes == 0 or quota_bytes > budget_bytes().
  [[nodiscard]] ClientId register_client(std::string name, std::size_t quota_bytes);
  // Grants `bytes` iff the client's reservation stays <= its quota and the sum of all reservations stays
  // <= the budget; nothing changes when it refuses. bytes == 0 is always granted. Throws tp::InvalidArgument
  // for an unknown id. The second form fills `refusal` when it returns false.
  [[nodiscard]] bool try_reserve(ClientId client, std::size_t bytes);
  [[nodiscard]] bool try_reserve(ClientId client, std::size_t bytes, ReserveRefusal& refusal);
  // Gives back bytes reserved earlier. Releasing more than the client holds releases what it holds.
  void release(ClientId client, std::size_t bytes) noexcept;
  // Ends the registration and returns everything the client still holds, at once.
  void unregister_client(ClientId client) noexcept;

  // Throws tp::InvalidArgument for an unknown id.
  [[nodiscard]] ClientUsage usage(ClientId client) const;
  // Every registered client, in slot order; one consistent snapshot.
  [[nodiscard]] std::vector<ClientUsage> clients() const;
  // Fixed for the arbiter's life.
  std::size_t budget_bytes() const noexcept { return budget_bytes_; }
  // Sum of all clients' reservations.
  [[nodiscard]] std::size_t reserved_bytes() const;
  // For reports: "in-process", or the shared-memory segment's name.
  const std::string& name() const noexcept { return name_; }

 protected:
  // Throws tp::InvalidArgument naming the arbiter for budget_bytes == 0.
  MemoryArbiter(std::string name, std::size_t budget_bytes);

 private:
  virtual ClientId do_register_client(std::string name, std::size_t quota_bytes) = 0;
  // `refusal` may be null; when not, it is filled on refusal.
  virtual bool do_try_reserve(ClientId client, std::size_t bytes, ReserveRefusal* refusal) = 0;
  virtual void do_release(ClientId client, std::size_t bytes) noexcept = 0;
  virtual void do_unregister_client(ClientId client) noexcept = 0;
  virtual ClientUsage do_usage(ClientId client) const = 0;
  virtual std::vector<ClientUsage> do_clients() const = 0;
  virtual std::size_t do_reserved_bytes() const = 0;

  // Immutable after construction.
  const std::string name_;
  const std::size_t budget_bytes_;
};

}  // namespace tp::arbiter

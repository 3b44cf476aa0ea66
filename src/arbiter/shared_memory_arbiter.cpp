// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/arbiter/shared_memory_arbiter.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "arbiter/process_identity.hpp"
#include "arbiter/reservation_rule.hpp"
#include "arbiter/shared_arbiter_layout.hpp"
#include "arbiter/shared_memory_segment.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::arbiter {
namespace {

static_assert(SharedMemoryArbiter::kMaxClients == detail::kSlotCount);
static_assert(SharedMemoryArbiter::kMaxNameLength + 1 == detail::kNameCapacity);

// Keeps the compiler from moving the stores before it past the stores after it: a process killed between
// two stores must leave them done in program order (see the layout's repair invariant).
void ordered() noexcept { std::atomic_signal_fence(std::memory_order_seq_cst); }

}  // namespace

// Holds the segment's mutex for one call and, on entry, reclaims the slots of dead processes (the rule
// every call follows). A previous owner that died holding the mutex (EOWNERDEAD) may have left its own
// slots half-written; the mutex is marked consistent and that same reclaim repairs exactly those slots
// (see shared_arbiter_layout.hpp).
class SharedMemoryArbiter::Lock {
 public:
  explicit Lock(const SharedMemoryArbiter& arbiter) noexcept : mutex_(&arbiter.table_->header.mutex) {
    int result = pthread_mutex_lock(mutex_);
    if (result == EOWNERDEAD) result = pthread_mutex_consistent(mutex_) == 0 ? 0 : EOWNERDEAD;
    error_ = result;
    if (held()) reclaimed_ = arbiter.reclaim_locked(arbiter.self());
  }
  ~Lock() {
    if (held()) pthread_mutex_unlock(mutex_);
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

  // EOWNERDEAD counts as held: the mutex is ours, only its consistency marking failed.
  bool held() const noexcept { return error_ == 0 || error_ == EOWNERDEAD; }
  // Slots of dead processes freed on entry.
  std::size_t reclaimed() const noexcept { return reclaimed_; }
  void check(const std::string& segment) const {
    if (held()) return;
    TP_THROW(DeviceError, "runtime", "shared-memory arbiter: cannot lock segment ", segment, ": ",
             std::strerror(error_),
             ". The segment is unusable; when no process uses it, remove it with "
             "SharedMemoryArbiter::remove(\"",
             segment, "\")");
  }

 private:
  pthread_mutex_t* mutex_;
  int error_ = 0;
  std::size_t reclaimed_ = 0;
};

SharedMemoryArbiter::SharedMemoryArbiter(std::string segment_name, std::size_t budget_bytes)
    : MemoryArbiter(std::move(segment_name), budget_bytes) {
  detail::check_segment_name(name());
  owner_.pid = ::getpid();
  const std::optional<std::uint64_t> start_time = detail::process_start_time(owner_.pid);
  if (!start_time) {
    TP_THROW(DeviceError, "runtime", "shared-memory arbiter ", name(), ": cannot read /proc/", owner_.pid,
             "/stat; the arbiter needs /proc to tell live processes from dead ones (mount /proc)");
  }
  owner_.start_time = *start_time;
  table_ = detail::map_segment(name(), budget_bytes);
}

SharedMemoryArbiter::~SharedMemoryArbiter() {
  if (::getpid() == owner_.pid) {
    std::vector<ClientId> remaining;
    {
      std::lock_guard lock(registered_mutex_);
      remaining.swap(registered_);
    }
    for (const ClientId& client : remaining) do_unregister_client(client);
  }
  detail::unmap_segment(table_);
}

bool SharedMemoryArbiter::remove(const std::string& segment_name) { return detail::unlink_segment(segment_name); }

std::uint64_t SharedMemoryArbiter::generation() const {
  Lock lock(*this);
  lock.check(name());
  return table_->header.generation;
}

std::size_t SharedMemoryArbiter::reclaim_dead_clients() {
  Lock lock(*this);
  lock.check(name());
  return lock.reclaimed();
}

void SharedMemoryArbiter::hold_lock_for_testing(const std::function<void()>& while_locked) {
  Lock lock(*this);
  lock.check(name());
  while_locked();
}

ClientId SharedMemoryArbiter::do_register_client(std::string client_name, std::size_t quota_bytes) {
  if (client_name.size() > kMaxNameLength) {
    TP_THROW(InvalidArgument, "runtime", "shared-memory arbiter ", name(), ": client name '", client_name, "' is ",
             client_name.size(), " bytes; the segment stores at most ", kMaxNameLength, ". Use a shorter name");
  }
  const Identity me = self();
  Lock lock(*this);
  lock.check(name());
  detail::SharedSlot* slots = table_->slots;
  auto* slot = std::find_if(slots, slots + detail::kSlotCount, [](const auto& each) { return each.in_use == 0; });
  if (slot == slots + detail::kSlotCount) {
    TP_THROW(DeviceError, "runtime", "shared-memory arbiter ", name(), ": all ", kMaxClients,
             " client slots are "
             "taken by live processes; close sessions (or processes) that no longer need the device");
  }
  slot->pid = me.pid;
  slot->start_time = me.start_time;
  slot->generation = ++table_->header.generation;
  slot->quota = quota_bytes;
  slot->reserved = 0;
  slot->peak = 0;
  std::memset(slot->name, 0, sizeof slot->name);
  std::memcpy(slot->name, client_name.data(), client_name.size());
  ordered();
  slot->in_use = 1;  // last: a process killed before this store leaves the slot free
  const ClientId id{static_cast<std::uint32_t>(slot - slots), slot->generation};
  std::lock_guard registered_lock(registered_mutex_);
  registered_.push_back(id);
  return id;
}

bool SharedMemoryArbiter::do_try_reserve(ClientId client, std::size_t bytes, ReserveRefusal* refusal) {
  Lock lock(*this);
  lock.check(name());
  detail::SharedSlot& slot = table_->slots[checked_locked(client, true)];
  const std::size_t total = reserved_locked();
  if (detail::within_quota(slot.quota, slot.reserved, bytes) && detail::within_budget(budget_bytes(), total, bytes)) {
    slot.reserved += bytes;
    slot.peak = std::max(slot.peak, slot.reserved);
    return true;
  }
  if (refusal != nullptr) {
    refusal->client = describe_locked(client.slot);
    refusal->budget_bytes = budget_bytes();
    refusal->reserved_bytes = total;
    detail::classify(*refusal, bytes);
  }
  return false;
}

void SharedMemoryArbiter::do_release(ClientId client, std::size_t bytes) noexcept {
  Lock lock(*this);
  if (!lock.held()) return;
  const int index = find_locked(client, true);
  if (index < 0) return;
  detail::SharedSlot& slot = table_->slots[index];
  slot.reserved -= std::min<std::uint64_t>(bytes, slot.reserved);
}

void SharedMemoryArbiter::do_unregister_client(ClientId client) noexcept {
  {
    Lock lock(*this);
    if (!lock.held()) return;
    const int index = find_locked(client, true);
    if (index < 0) return;
    detail::SharedSlot& slot = table_->slots[index];
    slot.in_use = 0;  // first: from here on the slot is free whatever else a kill interrupts
    ordered();
    slot.reserved = 0;
    ++table_->header.generation;
  }
  std::lock_guard registered_lock(registered_mutex_);
  std::erase(registered_, client);
}

ClientUsage SharedMemoryArbiter::do_usage(ClientId client) const {
  Lock lock(*this);
  lock.check(name());
  return describe_locked(static_cast<std::uint32_t>(checked_locked(client, false)));
}

std::vector<ClientUsage> SharedMemoryArbiter::do_clients() const {
  Lock lock(*this);
  lock.check(name());
  std::vector<ClientUsage> result;
  for (std::uint32_t index = 0; index < detail::kSlotCount; ++index) {
    if (table_->slots[index].in_use != 0) result.push_back(describe_locked(index));
  }
  return result;
}

std::size_t SharedMemoryArbiter::do_reserved_bytes() const {
  Lock lock(*this);
  lock.check(name());
  return reserved_locked();
}

SharedMemoryArbiter::Identity SharedMemoryArbiter::self() const noexcept {
  const pid_t pid = ::getpid();
  if (pid == owner_.pid) return owner_;
  // A fork()ed child: its own start time (the parent's slots stay the parent's).
  return Identity{pid, detail::process_start_time(pid).value_or(0)};
}

std::size_t SharedMemoryArbiter::reclaim_locked(const Identity& me) const noexcept {
  std::size_t freed = 0;
  for (detail::SharedSlot& slot : table_->slots) {
    if (slot.in_use == 0) continue;
    // Our own slots need no /proc read: the pid is ours, so only the start time can tell (a process that
    // died and whose pid we inherited).
    const bool gone =
        slot.pid == me.pid ? slot.start_time != me.start_time : detail::process_is_gone(slot.pid, slot.start_time);
    if (!gone) continue;
    slot.in_use = 0;
    ordered();
    slot.reserved = 0;
    ++table_->header.generation;
    ++freed;
  }
  return freed;
}

std::size_t SharedMemoryArbiter::reserved_locked() const noexcept {
  std::uint64_t total = 0;
  for (const detail::SharedSlot& slot : table_->slots) {
    if (slot.in_use != 0) total += slot.reserved;
  }
  return total;
}

ClientUsage SharedMemoryArbiter::describe_locked(std::uint32_t index) const {
  const detail::SharedSlot& slot = table_->slots[index];
  return ClientUsage{ClientId{index, slot.generation},
                     std::string(slot.name, ::strnlen(slot.name, sizeof slot.name)),
                     slot.quota,
                     slot.reserved,
                     slot.peak,
                     slot.pid};
}

int SharedMemoryArbiter::find_locked(ClientId client, bool owned) const noexcept {
  if (client.slot >= detail::kSlotCount) return -1;
  const detail::SharedSlot& slot = table_->slots[client.slot];
  if (slot.in_use == 0 || slot.generation != client.generation) return -1;
  if (owned && slot.pid != ::getpid()) return -1;
  return static_cast<int>(client.slot);
}

int SharedMemoryArbiter::checked_locked(ClientId client, bool owned) const {
  const int index = find_locked(client, owned);
  if (index < 0) {
    TP_THROW(InvalidArgument, "runtime", "shared-memory arbiter ", name(), ": client id (slot ", client.slot,
             ", generation ", client.generation, ") is not registered", owned ? " by this process" : "",
             ": it was unregistered, reclaimed, never came from register_client(), or belongs to another process");
  }
  return index;
}

}  // namespace tp::arbiter

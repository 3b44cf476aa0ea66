// SPDX-License-Identifier: Apache-2.0
#pragma once
// SharedMemoryArbiter: a MemoryArbiter whose table lives in a POSIX shared-memory segment, so that several
// processes on one machine share one device budget. Every process opens the same segment name with the same
// budget; each registers its own clients (sessions) with their quotas.
//
// The segment ("/tensorpool-<something>", under /dev/shm) holds a header {magic, layout version, budget,
// generation counter, robust process-shared mutex} and a fixed table of kMaxClients slots {in_use, pid,
// process start time, generation, name, quota, reserved, peak}; see src/arbiter/shared_arbiter_layout.hpp
// for its invariants. It is created with mode 0600 and is never used when another uid owns it, when group or
// others may access it, or when its layout version or budget differ from this process's: those throw
// tp::DeviceError naming the segment and the fix.
//
// Reclaim rule: every call first frees the slots of processes that are gone (kill(pid, 0) fails with
// ESRCH, /proc/<pid>/stat shows another start time, i.e. the pid was recycled, or the process is a zombie):
// their reservations return to the budget and the generation counter is bumped. A process that dies while
// holding the mutex (the robust mutex reports EOWNERDEAD) is repaired the same way before the mutex is
// marked consistent. A process that exits normally unregisters its clients in this object's destructor.
// All processes sharing a segment must see each other's pids (one pid namespace).
//
// Threads: calls from several threads of one process are safe (the segment's mutex serialises them too).
// A ClientId is usable only by the process that registered it; in a fork()ed child the parent's ids are
// refused, and the child's copy of this object unregisters nothing when destroyed.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tensorpool/arbiter/memory_arbiter.hpp"

namespace tp::arbiter {

namespace detail {
struct SharedTable;
}

class SharedMemoryArbiter final : public MemoryArbiter {
 public:
  static constexpr std::size_t kMaxClients = 64;
  static constexpr std::size_t kMaxNameLength = 63;  // bytes of a client name

  // Opens the segment, creating and initialising it when absent (creation is serialised by flock, so two
  // processes starting at once agree on one table). Throws tp::InvalidArgument for a malformed name ("/"
  // followed by 1-254 characters, no other "/") or budget_bytes == 0; tp::DeviceError when the OS refuses
  // the segment or it fails the checks above.
  SharedMemoryArbiter(std::string segment_name, std::size_t budget_bytes);
  // Unregisters the clients this object registered (only in the process that constructed it), then unmaps.
  ~SharedMemoryArbiter() override;

  // Unlinks the segment: processes that have it mapped keep using their copy; the next opener creates a new
  // one. For tests and cleanup. Returns false when no such segment exists; throws tp::DeviceError on
  // another failure (e.g. permission).
  static bool remove(const std::string& segment_name);

  // The segment's generation counter: bumped by every register, unregister and reclaim (after reclaiming).
  std::uint64_t generation() const;
  // Frees the slots of processes that are gone (as every call does first); returns how many were freed.
  std::size_t reclaim_dead_clients();

  // Test hook: takes the segment's mutex, calls `while_locked`, releases it. A child process that is killed
  // inside the callback leaves the mutex owned by a dead process, which the next call must recover.
  void hold_lock_for_testing(const std::function<void()>& while_locked);

 private:
  class Lock;
  struct Identity {
    pid_t pid = 0;
    std::uint64_t start_time = 0;
  };

  ClientId do_register_client(std::string name, std::size_t quota_bytes) override;
  bool do_try_reserve(ClientId client, std::size_t bytes, ReserveRefusal* refusal) override;
  void do_release(ClientId client, std::size_t bytes) noexcept override;
  void do_unregister_client(ClientId client) noexcept override;
  ClientUsage do_usage(ClientId client) const override;
  std::vector<ClientUsage> do_clients() const override;
  std::size_t do_reserved_bytes() const override;

  // The calling process (re-read after a fork).
  Identity self() const noexcept;
  // Callers hold the segment's mutex.
  std::size_t reclaim_locked(const Identity& self) const noexcept;
  std::size_t reserved_locked() const noexcept;
  ClientUsage describe_locked(std::uint32_t index) const;
  // The slot `client` names if it is registered (and, when `owned`, by the calling process); else -1.
  int find_locked(ClientId client, bool owned) const noexcept;
  int checked_locked(ClientId client, bool owned) const;  // throws tp::InvalidArgument instead of -1

  // Immutable after construction. table_ points into the mapping; what it points to is guarded by the
  // segment's mutex.
  detail::SharedTable* table_ = nullptr;
  Identity owner_;  // the constructing process

  mutable std::mutex registered_mutex_;  // guards registered_; taken after (never around) the segment's mutex
  std::vector<ClientId> registered_;     // clients this object registered and has not unregistered
};

}  // namespace tp::arbiter

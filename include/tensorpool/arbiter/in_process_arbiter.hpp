// SPDX-License-Identifier: Apache-2.0
#pragma once
// InProcessArbiter: a MemoryArbiter for the sessions of one process, kept in ordinary memory under one mutex.
//
// Data: a table of slots, one per registration; a slot is reused after its client unregisters, with a new
// generation, so stale ids are refused. Invariants (checked by tests after random operations):
//   - every live slot has reserved <= quota <= budget and peak >= reserved;
//   - reserved_total_ == sum of reserved over live slots <= budget;
//   - next_generation_ is larger than every generation handed out.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tensorpool/arbiter/memory_arbiter.hpp"

namespace tp::arbiter {

class InProcessArbiter final : public MemoryArbiter {
 public:
  // Throws tp::InvalidArgument for budget_bytes == 0.
  explicit InProcessArbiter(std::size_t budget_bytes, std::string name = "in-process");

 private:
  struct Slot {
    bool in_use = false;
    std::uint64_t generation = 0;
    std::string name;
    std::size_t quota = 0;
    std::size_t reserved = 0;
    std::size_t peak = 0;
  };

  ClientId do_register_client(std::string name, std::size_t quota_bytes) override;
  bool do_try_reserve(ClientId client, std::size_t bytes, ReserveRefusal* refusal) override;
  void do_release(ClientId client, std::size_t bytes) noexcept override;
  void do_unregister_client(ClientId client) noexcept override;
  ClientUsage do_usage(ClientId client) const override;
  std::vector<ClientUsage> do_clients() const override;
  std::size_t do_reserved_bytes() const override;

  // Callers hold mutex_. The live slot `client` names, or null.
  const Slot* find(ClientId client) const noexcept;
  Slot* find(ClientId client) noexcept;
  std::uint32_t checked(ClientId client) const;  // client.slot; throws tp::InvalidArgument when find() is null
  ClientUsage describe(std::uint32_t index) const;

  mutable std::mutex mutex_;  // guards slots_, reserved_total_, next_generation_
  std::vector<Slot> slots_;
  std::size_t reserved_total_ = 0;
  std::uint64_t next_generation_ = 1;
};

}  // namespace tp::arbiter

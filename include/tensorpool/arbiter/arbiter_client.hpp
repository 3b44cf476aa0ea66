// SPDX-License-Identifier: Apache-2.0
#pragma once
// ArbiterClient: one registration with a MemoryArbiter, owned. The constructor registers, the destructor
// unregisters (which returns everything the client still holds to the budget at once), so a session that
// owns one cannot leak its share. Move-only; a moved-from handle holds nothing and its destructor does
// nothing. The arbiter is borrowed and must outlive the handle.
//
// Thread safety: as the arbiter's calls; moving or resetting a handle while another thread uses it is a race.

#include <cstddef>
#include <string>

#include "tensorpool/arbiter/memory_arbiter.hpp"

namespace tp::arbiter {

class ArbiterClient {
 public:
  // Registers `name` with `quota_bytes`; throws what MemoryArbiter::register_client throws.
  ArbiterClient(MemoryArbiter& arbiter, std::string name, std::size_t quota_bytes);
  ~ArbiterClient();
  ArbiterClient(ArbiterClient&& other) noexcept;
  ArbiterClient& operator=(ArbiterClient&& other) noexcept;
  ArbiterClient(const ArbiterClient&) = delete;
  ArbiterClient& operator=(const ArbiterClient&) = delete;

  // Unregisters now (idempotent); afterwards registered() is false.
  void reset() noexcept;
  bool registered() const noexcept { return arbiter_ != nullptr; }

  // Require registered(); the arbiter's calls for this client.
  ClientId id() const noexcept { return id_; }
  MemoryArbiter& arbiter() const noexcept { return *arbiter_; }
  const std::string& name() const noexcept { return name_; }
  [[nodiscard]] bool try_reserve(std::size_t bytes) { return arbiter_->try_reserve(id_, bytes); }
  [[nodiscard]] bool try_reserve(std::size_t bytes, ReserveRefusal& refusal) {
    return arbiter_->try_reserve(id_, bytes, refusal);
  }
  void release(std::size_t bytes) noexcept { arbiter_->release(id_, bytes); }
  [[nodiscard]] ClientUsage usage() const { return arbiter_->usage(id_); }

 private:
  MemoryArbiter* arbiter_ = nullptr;  // null once moved from or reset
  ClientId id_;
  std::string name_;
};

}  // namespace tp::arbiter

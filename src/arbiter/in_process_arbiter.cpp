// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/arbiter/in_process_arbiter.hpp"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "arbiter/reservation_rule.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::arbiter {

InProcessArbiter::InProcessArbiter(std::size_t budget_bytes, std::string name)
    : MemoryArbiter(std::move(name), budget_bytes) {}

ClientId InProcessArbiter::do_register_client(std::string name, std::size_t quota_bytes) {
  std::lock_guard lock(mutex_);
  auto free_slot = std::find_if(slots_.begin(), slots_.end(), [](const Slot& slot) { return !slot.in_use; });
  if (free_slot == slots_.end()) free_slot = slots_.insert(slots_.end(), Slot{});
  free_slot->in_use = true;
  free_slot->generation = next_generation_++;
  free_slot->name = std::move(name);
  free_slot->quota = quota_bytes;
  free_slot->reserved = 0;
  free_slot->peak = 0;
  return ClientId{static_cast<std::uint32_t>(free_slot - slots_.begin()), free_slot->generation};
}

bool InProcessArbiter::do_try_reserve(ClientId client, std::size_t bytes, ReserveRefusal* refusal) {
  std::lock_guard lock(mutex_);
  Slot& slot = slots_[checked(client)];
  if (detail::within_quota(slot.quota, slot.reserved, bytes) &&
      detail::within_budget(budget_bytes(), reserved_total_, bytes)) {
    slot.reserved += bytes;
    slot.peak = std::max(slot.peak, slot.reserved);
    reserved_total_ += bytes;
    return true;
  }
  if (refusal != nullptr) {
    refusal->client = describe(client.slot);
    refusal->budget_bytes = budget_bytes();
    refusal->reserved_bytes = reserved_total_;
    detail::classify(*refusal, bytes);
  }
  return false;
}

void InProcessArbiter::do_release(ClientId client, std::size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  Slot* slot = find(client);
  if (slot == nullptr) return;
  const std::size_t returned = std::min(bytes, slot->reserved);
  slot->reserved -= returned;
  reserved_total_ -= returned;
}

void InProcessArbiter::do_unregister_client(ClientId client) noexcept {
  std::lock_guard lock(mutex_);
  Slot* slot = find(client);
  if (slot == nullptr) return;
  reserved_total_ -= slot->reserved;
  *slot = Slot{};  // frees the name's storage too; the slot's next owner gets a new generation
}

ClientUsage InProcessArbiter::do_usage(ClientId client) const {
  std::lock_guard lock(mutex_);
  return describe(checked(client));
}

std::vector<ClientUsage> InProcessArbiter::do_clients() const {
  std::lock_guard lock(mutex_);
  std::vector<ClientUsage> result;
  for (std::uint32_t index = 0; index < slots_.size(); ++index) {
    if (slots_[index].in_use) result.push_back(describe(index));
  }
  return result;
}

std::size_t InProcessArbiter::do_reserved_bytes() const {
  std::lock_guard lock(mutex_);
  return reserved_total_;
}

const InProcessArbiter::Slot* InProcessArbiter::find(ClientId client) const noexcept {
  if (client.slot >= slots_.size()) return nullptr;
  const Slot& slot = slots_[client.slot];
  return slot.in_use && slot.generation == client.generation ? &slot : nullptr;
}

InProcessArbiter::Slot* InProcessArbiter::find(ClientId client) noexcept {
  return const_cast<Slot*>(std::as_const(*this).find(client));
}

std::uint32_t InProcessArbiter::checked(ClientId client) const {
  if (find(client) == nullptr) {
    TP_THROW(InvalidArgument, "runtime", "memory arbiter '", name(), "': client id (slot ", client.slot,
             ", generation ", client.generation,
             ") is not registered: it was unregistered or never came from "
             "this arbiter's register_client()");
  }
  return client.slot;
}

ClientUsage InProcessArbiter::describe(std::uint32_t index) const {
  const Slot& slot = slots_[index];
  return ClientUsage{ClientId{index, slot.generation},     slot.name, slot.quota, slot.reserved, slot.peak,
                     static_cast<std::int64_t>(::getpid())};
}

}  // namespace tp::arbiter

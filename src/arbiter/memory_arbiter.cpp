// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/arbiter/memory_arbiter.hpp"

#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"

namespace tp::arbiter {
namespace {

std::size_t checked_budget(std::size_t budget_bytes, const std::string& name) {
  if (budget_bytes == 0) {
    TP_THROW(InvalidArgument, "runtime", "memory arbiter '", name,
             "': budget_bytes = 0 would refuse every reservation; pass the device's budget in bytes");
  }
  return budget_bytes;
}

}  // namespace

MemoryArbiter::MemoryArbiter(std::string name, std::size_t budget_bytes)
    : name_(std::move(name)), budget_bytes_(checked_budget(budget_bytes, name_)) {}

ClientId MemoryArbiter::register_client(std::string name, std::size_t quota_bytes) {
  if (name.empty()) {
    TP_THROW(InvalidArgument, "runtime", "memory arbiter '", name_,
             "': a client needs a name (reports and out-of-memory errors show it); pass e.g. \"session-1\"");
  }
  if (quota_bytes == 0 || quota_bytes > budget_bytes_) {
    TP_THROW(InvalidArgument, "runtime", "memory arbiter '", name_, "': client '", name, "' asks for a quota of ",
             format_bytes(quota_bytes), " (", quota_bytes,
             " bytes); a quota must be in (0, budget = ", format_bytes(budget_bytes_),
             "]. Pass a positive quota no larger than the device budget");
  }
  return do_register_client(std::move(name), quota_bytes);
}

bool MemoryArbiter::try_reserve(ClientId client, std::size_t bytes) { return do_try_reserve(client, bytes, nullptr); }

bool MemoryArbiter::try_reserve(ClientId client, std::size_t bytes, ReserveRefusal& refusal) {
  return do_try_reserve(client, bytes, &refusal);
}

void MemoryArbiter::release(ClientId client, std::size_t bytes) noexcept {
  if (bytes != 0) do_release(client, bytes);
}

void MemoryArbiter::unregister_client(ClientId client) noexcept {
  if (client.valid()) do_unregister_client(client);
}

ClientUsage MemoryArbiter::usage(ClientId client) const { return do_usage(client); }

std::vector<ClientUsage> MemoryArbiter::clients() const { return do_clients(); }

std::size_t MemoryArbiter::reserved_bytes() const { return do_reserved_bytes(); }

}  // namespace tp::arbiter

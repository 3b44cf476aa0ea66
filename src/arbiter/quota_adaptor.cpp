// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/arbiter/quota_adaptor.hpp"

#include <algorithm>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/memory_stack.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::arbiter {
namespace {

std::string adaptor_name(const ArbiterClient& client, std::string name) {
  if (!client.registered()) {
    TP_THROW(InvalidArgument, "runtime",
             "QuotaAdaptor: the ArbiterClient is not registered (moved from or reset);"
             " pass a live registration");
  }
  return name.empty() ? "quota:" + client.name() : std::move(name);
}

}  // namespace

QuotaAdaptor::QuotaAdaptor(memory::MemoryResource& upstream, ArbiterClient client, std::string name)
    : ResourceAdaptor(upstream, adaptor_name(client, std::move(name))), client_(std::move(client)) {}

QuotaAdaptor::QuotaAdaptor(memory::MemoryResource& upstream, MemoryArbiter& arbiter, std::string client_name,
                           std::size_t quota_bytes)
    : QuotaAdaptor(upstream, ArbiterClient(arbiter, std::move(client_name), quota_bytes)) {}

void* QuotaAdaptor::do_allocate(std::size_t bytes, std::size_t alignment, const memory::AllocationTag& tag) {
  void* ptr = nullptr;
  try {
    ptr = upstream().allocate(bytes, alignment, tag);
  } catch (OutOfMemoryError& error) {
    std::size_t held = 0;
    {
      const std::lock_guard lock(mutex_);
      ++counters_.num_ooms;
      held = counters_.bytes_in_use;
    }
    // Other clients matter only when they hold some of the device: then closing them frees memory for this one.
    const std::size_t reserved_by_all = client_.arbiter().reserved_bytes();
    const std::size_t others = reserved_by_all > held ? reserved_by_all - held : 0;
    error.amend([&](OutOfMemoryReport& report) {
      if (!report.detail.empty()) report.detail += "\n  ";
      report.detail += "Client '" + client_.name() + "' of memory arbiter '" + client_.arbiter().name() + "' holds " +
                       format_bytes(held);
      report.detail += others > 0 ? "; other clients hold " + format_bytes(others) +
                                        " of the same device: close other sessions (or processes) sharing it, or "
                                        "use a smaller batch."
                                  : "; no other client holds memory on the device.";
    });
    throw;
  }
  const std::size_t charged = upstream().allocated_size(ptr, bytes);
  ReserveRefusal refusal;
  bool granted = false;
  try {
    granted = client_.try_reserve(charged, refusal);
  } catch (...) {
    upstream().deallocate(ptr, bytes);
    throw;
  }
  if (!granted) {
    upstream().deallocate(ptr, bytes);
    refuse(bytes, charged, tag, refusal);
  }
  const std::lock_guard lock(mutex_);
  counters_.record_allocation(bytes, charged, 0);
  return ptr;
}

void QuotaAdaptor::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  // Sized while the allocation is still live: the upstream knows its chunk only until it is freed.
  const std::size_t charged = upstream().allocated_size(ptr, bytes);
  client_.release(charged);
  upstream().deallocate(ptr, bytes);
  const std::lock_guard lock(mutex_);
  counters_.record_free(bytes, charged, 0);
}

memory::MemoryStats QuotaAdaptor::do_stats() const {
  memory::MemoryStats stats = upstream().stats();
  const MemoryArbiter& arbiter = client_.arbiter();
  const std::size_t budget_left = arbiter.budget_bytes() - std::min(arbiter.budget_bytes(), arbiter.reserved_bytes());
  const ClientUsage usage = client_.usage();
  const std::lock_guard lock(mutex_);
  stats.bytes_in_use = counters_.bytes_in_use;
  stats.peak_bytes_in_use = counters_.peak_bytes_in_use;
  stats.bytes_requested = counters_.bytes_requested;
  stats.peak_bytes_requested = counters_.peak_bytes_requested;
  stats.num_allocs = counters_.num_allocs;
  stats.num_frees = counters_.num_frees;
  stats.largest_alloc = counters_.largest_alloc;
  stats.num_ooms = counters_.num_ooms;
  stats.bytes_limit = std::min(stats.bytes_limit.value_or(usage.quota_bytes), usage.quota_bytes);
  const std::size_t quota_left = usage.quota_bytes - std::min(usage.quota_bytes, usage.reserved_bytes);
  stats.largest_free_block = std::min({stats.largest_free_block, quota_left, budget_left});
  return stats;
}

void QuotaAdaptor::do_reset_peak() {
  const std::lock_guard lock(mutex_);
  counters_.reset_peaks();
}

void QuotaAdaptor::refuse(std::size_t requested, std::size_t charged, const memory::AllocationTag& tag,
                          const ReserveRefusal& refusal) {
  {
    const std::lock_guard lock(mutex_);
    ++counters_.num_ooms;
  }
  const ClientUsage& client = refusal.client;
  const std::size_t quota_left = client.quota_bytes - client.reserved_bytes;
  const std::size_t budget_left = refusal.budget_bytes - refusal.reserved_bytes;
  const std::size_t headroom = std::min(quota_left, budget_left);
  // The limit is what this client could reach now, so the report reads as a shortage, not fragmentation.
  auto report = OutOfMemoryReport::for_request(name(), requested, charged, tag, client.reserved_bytes + headroom,
                                               client.reserved_bytes, refusal.reserved_bytes);
  report.device = device_name();
  report.largest_free_block = headroom;
  const std::string who = "Client '" + client.name + "' of memory arbiter '" + client_.arbiter().name() + "'";
  const std::string why = refusal.over_quota ? " would exceed its quota" : " would exceed the shared budget";
  report.detail = who + why + ": it holds " + format_bytes(client.reserved_bytes) + " of its quota of " +
                  format_bytes(client.quota_bytes) + " and asks for " + format_bytes(charged) +
                  " more; the arbiter's budget is " + format_bytes(refusal.budget_bytes) + ", of which " +
                  format_bytes(refusal.reserved_bytes) + " are reserved by all clients (" + format_bytes(budget_left) +
                  " left).\n  Hint: " +
                  (refusal.over_quota ? "raise this session's quota, use a smaller batch, or free tensors it no "
                                        "longer needs."
                                      : "close other sessions (or processes) sharing the device, use a smaller "
                                        "batch, or lower the other sessions' quotas.");
  throw OutOfMemoryError(std::move(report));
}

std::string QuotaAdaptor::device_name() const {
  const auto* stack = dynamic_cast<const memory::MemoryStack*>(&upstream());
  return stack != nullptr ? stack->config().device : std::string();
}

}  // namespace tp::arbiter

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/kernel_table.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>

namespace tp::ops::kernels {

namespace {

// One slot per DeviceKind, indexed by the enumerator's value. Slots only ever go from null to a table with
// static storage (or from one such table to another), so a reader that loads a pointer may use it for the
// life of the process; release/acquire publishes the table's entries with it.
constexpr std::size_t kSlots = 8;
static_assert(std::ranges::all_of(device::kDeviceKinds,
                                  [](device::DeviceKind kind) { return static_cast<std::size_t>(kind) < kSlots; }),
              "the kernel registry needs a slot for every DeviceKind: raise kSlots");

constinit std::array<std::atomic<const KernelTable*>, kSlots> registry{};

std::size_t slot_of(device::DeviceKind kind) noexcept { return static_cast<std::size_t>(kind); }

}  // namespace

void register_kernels(device::DeviceKind kind, const KernelTable& table) noexcept {
  const std::size_t slot = slot_of(kind);
  if (slot >= registry.size()) return;  // unreachable while the static_assert above covers every kind
  registry[slot].store(&table, std::memory_order_release);
}

const KernelTable* kernels_for(device::DeviceKind kind) noexcept {
  const std::size_t slot = slot_of(kind);
  if (slot >= registry.size()) return nullptr;
  return registry[slot].load(std::memory_order_acquire);
}

}  // namespace tp::ops::kernels

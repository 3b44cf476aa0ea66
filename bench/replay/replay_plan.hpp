// SPDX-License-Identifier: Apache-2.0
#pragma once
// ReplayPlan: a trace compiled for timing. Each allocation gets a slot index (slots are recycled once their
// allocation is freed), so the timed loop is an array walk with no hash map: allocate stores the pointer in
// its slot, free reads it back. Allocation failures in the trace are skipped; allocations the trace never
// frees are freed after each round, outside the timed loop.
//
// replay_round() is the measured loop, kept out of line so callgrind can collect it alone
// (valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*replay_round*').

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensorpool/memory/trace.hpp"

namespace tp::bench {

struct ReplayOp {
  std::size_t size = 0;
  std::uint32_t slot = 0;
  bool allocate = false;
};

struct ReplayPlan {
  std::vector<ReplayOp> ops;        // allocates and frees in trace order
  std::vector<ReplayOp> leftovers;  // allocations never freed: freed after each round
  std::size_t slot_count = 0;
  std::size_t allocations = 0;      // allocate ops (the "pairs" of ns per pair)
  std::size_t peak_live_bytes = 0;  // max sum of live requested sizes (from the trace)
};

ReplayPlan compile_plan(const memory::Trace& trace);

inline constexpr std::size_t kTouchStride = 4096;

// Writes one byte in every 4 KiB of [ptr, ptr + size): each page the block spans becomes resident.
inline void touch_pages(void* ptr, std::size_t size) noexcept {
  auto* bytes = static_cast<volatile unsigned char*>(ptr);
  for (std::size_t offset = 0; offset < size; offset += kTouchStride) bytes[offset] = 1;
}

// Keeps the compiler from eliding an allocation whose result is otherwise only stored and freed.
inline void keep(void* ptr) noexcept { asm volatile("" : : "r"(ptr) : "memory"); }

// Runs the plan's ops once and returns the elapsed time of the ops alone. `Allocator` has
// `void* allocate(std::size_t)` and `void deallocate(void*, std::size_t) noexcept`.
template <bool kTouch, typename Allocator>
[[gnu::noinline]] std::chrono::nanoseconds replay_round(const ReplayPlan& plan, std::vector<void*>& slots,
                                                        Allocator& allocator) {
  void** slot_pointers = slots.data();
  const auto start = std::chrono::steady_clock::now();
  for (const ReplayOp& op : plan.ops) {
    if (op.allocate) {
      void* ptr = allocator.allocate(op.size);
      keep(ptr);
      if constexpr (kTouch) touch_pages(ptr, op.size);
      slot_pointers[op.slot] = ptr;
    } else {
      allocator.deallocate(slot_pointers[op.slot], op.size);
    }
  }
  const auto stop = std::chrono::steady_clock::now();
  for (const ReplayOp& op : plan.leftovers) allocator.deallocate(slot_pointers[op.slot], op.size);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start);
}

}  // namespace tp::bench

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The bytes of a SharedMemoryArbiter segment. Every process that maps the segment reads and writes this
// layout, so it holds only fixed-size, fixed-width, trivially copyable fields; any change to it must bump
// kLayoutVersion (an opener refuses a segment of another version instead of misreading it). Internal
// header: tests include it to forge states (a recycled pid, a stale layout version).
//
// Invariants, under header.mutex:
//   - a slot with in_use == 1 has reserved <= quota <= header.budget_bytes and peak >= reserved;
//   - the sum of reserved over in-use slots <= header.budget_bytes (computed from the slots each time, so
//     there is no separate total that a process killed between two stores could leave wrong);
//   - header.generation is larger than every slot's generation; it is bumped whenever a client registers,
//     unregisters or is reclaimed, so a ClientId names one registration only;
//   - a process writes only slots it registered (and frees slots of dead processes while reclaiming), and a
//     registration stores in_use = 1 last; so after an owner dies holding the mutex, every slot it may have
//     left half-written is its own or free, and reclaiming dead processes' slots repairs the table.
// magic is stored last at initialisation (under the creation flock); a segment whose magic is not set was
// never initialised and is initialised by the next opener.

#include <pthread.h>

#include <cstdint>
#include <type_traits>

namespace tp::arbiter::detail {

inline constexpr std::uint64_t kSegmentMagic = 0x7470'6172'6269'7472ull;  // "tparbitr"
inline constexpr std::uint32_t kLayoutVersion = 1;
inline constexpr std::uint32_t kSlotCount = 64;
inline constexpr std::uint32_t kNameCapacity = 64;  // bytes, including the terminating NUL

struct SharedSlot {
  std::uint32_t in_use;      // 1 while registered
  std::int32_t pid;          // the registering process
  std::uint64_t start_time;  // its start time (/proc/<pid>/stat field 22), to detect a recycled pid
  std::uint64_t generation;  // header.generation at registration
  std::uint64_t quota;       // bytes
  std::uint64_t reserved;    // bytes
  std::uint64_t peak;        // bytes
  char name[kNameCapacity];  // NUL-terminated
};

struct SharedHeader {
  std::uint64_t magic;
  std::uint32_t layout_version;
  std::uint32_t slot_count;
  std::uint64_t budget_bytes;
  std::uint64_t generation;
  std::uint64_t table_bytes;  // sizeof(SharedTable) as the creator built it
  pthread_mutex_t mutex;      // process-shared, robust; guards everything in the table but magic
};

struct SharedTable {
  SharedHeader header;
  SharedSlot slots[kSlotCount];
};

static_assert(std::is_trivially_copyable_v<SharedSlot> && std::is_standard_layout_v<SharedTable>);

}  // namespace tp::arbiter::detail

// SPDX-License-Identifier: Apache-2.0
// Allocation-failure seam for one test binary: replaces the global operator new so that, while a
// FailAllocations is alive on a thread, that thread's operator new calls from number `succeed` on (counting
// from 0) throw std::bad_alloc. Replacement operators must be defined once per program: include this header
// in exactly one translation unit of a test executable.
#pragma once

#include <cstdlib>
#include <new>

namespace tp::test {
inline thread_local long g_fail_from = -1;
inline thread_local long g_allocations = 0;

// Arms the seam for its scope: allocations number `succeed` onwards fail.
class FailAllocations {
 public:
  explicit FailAllocations(long succeed) noexcept {
    g_allocations = 0;
    g_fail_from = succeed;
  }
  ~FailAllocations() { g_fail_from = -1; }
  FailAllocations(const FailAllocations&) = delete;
  FailAllocations& operator=(const FailAllocations&) = delete;
  // operator new calls since the seam was armed, the failed ones included.
  static long attempted() noexcept { return g_allocations; }
};
}  // namespace tp::test

void* operator new(std::size_t bytes) {
  if (tp::test::g_fail_from >= 0 && tp::test::g_allocations++ >= tp::test::g_fail_from) throw std::bad_alloc();
  if (void* ptr = std::malloc(bytes == 0 ? 1 : bytes)) return ptr;
  throw std::bad_alloc();
}
// GCC sees the inlined std::free pair with a `new` expression elsewhere; here they do match.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* ptr) noexcept { std::free(ptr); }
void operator delete(void* ptr, std::size_t /*bytes*/) noexcept { std::free(ptr); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

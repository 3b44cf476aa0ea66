// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small index per running thread, one pool for the whole process: a thread takes one at its first use and
// gives it back at its exit, and a thread taking one gets the smallest free index, so no two running threads
// hold the same index and threads started together hold neighbouring ones. The statistics adaptor's counter
// shards and the sharded arena's choice of shard key on it. A thread beyond kThreadIndices, and one that has
// already given its index back at exit, reads kThreadIndices: shared by all such threads.

#include <cstddef>

namespace tp::memory::detail {

inline constexpr std::size_t kThreadIndices = 64;
inline constexpr std::size_t kNoThreadIndex = ~std::size_t{0};

// This thread's index; kNoThreadIndex before its first take_thread_index(). constinit and without a
// destructor, so reading it costs no initialization check: the per-call path.
extern constinit thread_local std::size_t tls_thread_index;

// Takes an index for this thread (the smallest given-back one, else the next) and stores it in tls_thread_index;
// kThreadIndices when all are held or the thread is exiting.
[[gnu::noinline]] std::size_t take_thread_index() noexcept;

inline std::size_t this_thread_index() noexcept {
  const std::size_t index = tls_thread_index;
  return index != kNoThreadIndex ? index : take_thread_index();
}

}  // namespace tp::memory::detail

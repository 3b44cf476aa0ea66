// SPDX-License-Identifier: Apache-2.0
#include "memory/thread_index.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

namespace tp::memory::detail {
namespace {

// The pool's mutex orders a thread's last use of an index before the next holder's first. Never destroyed:
// threads may exit after static destruction has begun.
struct ThreadIndexPool {
  std::mutex mutex;               // guards both below
  std::vector<std::size_t> free;  // indices given back, for reuse
  std::size_t next = 0;           // indices handed out so far
};

ThreadIndexPool& thread_index_pool() {
  static auto* pool = new ThreadIndexPool;  // NOLINT(cppcoreguidelines-owning-memory): leaked on purpose, above
  return *pool;
}

// Gives this thread's index back at its exit; armed by the thread's take_thread_index().
struct ThreadIndexReturn {
  bool held = false;
  ThreadIndexReturn() = default;
  ThreadIndexReturn(const ThreadIndexReturn&) = delete;
  ThreadIndexReturn& operator=(const ThreadIndexReturn&) = delete;
  ~ThreadIndexReturn() {
    if (!held) return;
    ThreadIndexPool& pool = thread_index_pool();
    const std::lock_guard lock(pool.mutex);
    try {
      pool.free.push_back(tls_thread_index);
    } catch (...) {  // no memory to keep the index: it is never reused
    }
    tls_thread_index = kThreadIndices;  // uses from later destructors share the last index
  }
};
thread_local ThreadIndexReturn thread_index_return;

}  // namespace

constinit thread_local std::size_t tls_thread_index = kNoThreadIndex;

std::size_t take_thread_index() noexcept {
  ThreadIndexPool& pool = thread_index_pool();
  std::size_t index = kThreadIndices;
  {
    const std::lock_guard lock(pool.mutex);
    if (!pool.free.empty()) {
      // The smallest: threads that allocate at once then hold neighbouring indices, which the sharded arena
      // maps to different shards.
      const auto smallest = std::min_element(pool.free.begin(), pool.free.end());
      index = *smallest;
      pool.free.erase(smallest);
    } else if (pool.next < kThreadIndices) {
      index = pool.next++;
    }
  }
  tls_thread_index = index;
  if (index < kThreadIndices) thread_index_return.held = true;
  return index;
}

}  // namespace tp::memory::detail

// SPDX-License-Identifier: Apache-2.0
#pragma once
// poll_before_sleeping(ready): polls `ready` for up to kPollBudget before a thread goes to sleep on a
// condition variable. Device streams hand work to each other every few tens of microseconds (the host's next
// launch, another device's event before a collective); a sleep costs a futex wait, a wake-up syscall on the
// other side and the scheduler's wake-up latency, often more than the wait itself (`perf sched timehist`
// shows it; docs/benchmarks-history.md, "Training throughput against PyTorch", polling streams).
//
// Between polls the thread yields instead of spinning on a pause instruction: with fewer cores than busy
// threads (the host thread plus one worker per device on two cores), a spinning waiter would hold the core
// that the thread it waits for needs; a yield hands the core over when anyone else is runnable and costs one
// syscall when nobody is. Bounded, so a stream with nothing to do still sleeps.
//
// The poll's effect on training throughput, one device and mirrored: docs/benchmarks-history.md, "Training
// throughput against PyTorch", polling streams.

#include <chrono>
#include <thread>

namespace tp::device::detail {

inline constexpr std::chrono::microseconds kPollBudget{200};

// True as soon as ready() is; false once the budget is spent with ready() still false.
template <typename Ready>
bool poll_before_sleeping(Ready&& ready) {
  if (ready()) return true;
  const auto deadline = std::chrono::steady_clock::now() + kPollBudget;
  for (;;) {
    std::this_thread::yield();
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

}  // namespace tp::device::detail

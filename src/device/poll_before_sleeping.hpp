#pragma once
// poll_before_sleeping(ready): polls `ready` for up to kPollBudget before a thread goes to sleep on a
// condition variable. Device streams hand work to each other every few tens of microseconds (the host's next
// launch, another device's event before a collective); a sleep costs a futex wait, a wake-up syscall on the
// other side and the scheduler's wake-up latency (about 20 us per wake-up on the 2-vCPU VM, measured with
// `perf sched timehist`), often more than the wait itself.
//
// Between polls the thread yields instead of spinning on a pause instruction: with fewer cores than busy
// threads (the host thread plus one worker per device on two cores), a spinning waiter would hold the core
// that the thread it waits for needs; a yield hands the core over when anyone else is runnable and costs one
// syscall when nobody is. Bounded, so a stream with nothing to do still sleeps.
//
// Measured without and with the poll (1 epoch of the main job, batch 32, one BLAS thread per device, medians
// of 3; docs/benchmarks.md): one device 34.9k -> 40.3k samples/s, mirrored over two sim devices 25.7k -> 36.6k.

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

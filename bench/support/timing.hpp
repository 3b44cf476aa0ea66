// SPDX-License-Identifier: Apache-2.0
#pragma once
// Timing helpers of the kernel benchmarks: seconds per call of a body timed over a minimum duration, and the
// median of rounds (the machines are shared and noisy: every figure is a median of alternating rounds).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

namespace tp::bench {

// Seconds per call of `body`, timed over enough calls to last about `seconds` (after one warm-up call).
inline double time_per_call(const std::function<void()>& body, double seconds) {
  using Clock = std::chrono::steady_clock;
  body();
  std::size_t calls = 1;
  for (;;) {
    const auto start = Clock::now();
    for (std::size_t call = 0; call < calls; ++call) body();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (elapsed >= seconds || calls >= (std::size_t{1} << 24)) return elapsed / static_cast<double>(calls);
    calls =
        std::max(calls * 2, static_cast<std::size_t>(static_cast<double>(calls) * seconds / std::max(elapsed, 1e-9)));
  }
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace tp::bench

// SPDX-License-Identifier: Apache-2.0
// tp_core_round_trip: how far apart two CPUs are right now. One cache line is passed back and forth between two
// threads pinned to the first two CPUs this process may run on; the median over --rounds batches of the time per
// round trip is printed as one JSON line. On a VM whose two vCPUs the hypervisor places on cores that share a
// last-level cache the trip is short; when it places them apart, every line one thread writes and the other reads
// (a fork-join's hand-off, a stream's queue, a tensor's reference count) costs several times more, and a
// two-thread training step slows down while two independent processes do not (docs/benchmarks.md, "Defaults
// against every peer"). bench/peers/compare_peers.py --capacity-probe records it before each run.
#include <pthread.h>
#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

// Both threads spin on this line only: the other fields of its cache line stay untouched.
struct alignas(64) Ball {
  std::atomic<long> value{0};
};

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// Nanoseconds per round trip over `trips` trips between CPUs `a` (this thread) and `b`.
double time_trips(int a, int b, long trips) {
  Ball ball;
  bool pinned = true;
  std::thread other([&] {
    pinned = pin_to(b) && pinned;
    for (long trip = 0; trip < trips; ++trip) {
      while (ball.value.load(std::memory_order_acquire) != 2 * trip + 1) {}
      ball.value.store(2 * trip + 2, std::memory_order_release);
    }
  });
  const bool here = pin_to(a);
  const auto start = std::chrono::steady_clock::now();
  for (long trip = 0; trip < trips; ++trip) {
    ball.value.store(2 * trip + 1, std::memory_order_release);
    while (ball.value.load(std::memory_order_acquire) != 2 * trip + 2) {}
  }
  const auto end = std::chrono::steady_clock::now();
  other.join();
  if (!here || !pinned) return -1;
  return std::chrono::duration<double, std::nano>(end - start).count() / static_cast<double>(trips);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tp_core_round_trip: the time of one cache line's round trip between the first two CPUs this "
      "process may run on (one JSON line)"};
  int rounds = 5;
  long trips = 100000;
  app.add_option("--rounds", rounds, "batches of trips timed; the median is printed")->check(CLI::Range(1, 1000));
  app.add_option("--trips", trips, "round trips per batch")->check(CLI::Range(1L, 100000000L));
  CLI11_PARSE(app, argc, argv);

  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    std::fprintf(stderr, "tp_core_round_trip: sched_getaffinity failed: cannot tell which CPUs to use\n");
    return 1;
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  if (cpus.size() < 2) {
    std::fprintf(stderr,
                 "tp_core_round_trip: this process may run on %zu CPU(s); it needs two (run it without taskset or "
                 "with a mask of at least two CPUs)\n",
                 cpus.size());
    return 1;
  }
  std::vector<double> times;
  for (int round = 0; round < rounds; ++round) {
    const double ns = time_trips(cpus[0], cpus[1], trips);
    if (ns < 0) {
      std::fprintf(stderr, "tp_core_round_trip: could not pin the threads to CPUs %d and %d\n", cpus[0], cpus[1]);
      return 1;
    }
    times.push_back(ns);
  }
  std::sort(times.begin(), times.end());
  std::printf("{\"core_round_trip_ns\": %.1f, \"cpus\": [%d, %d], \"rounds\": %d, \"trips\": %ld}\n",
              times[times.size() / 2], cpus[0], cpus[1], rounds, trips);
  return 0;
}

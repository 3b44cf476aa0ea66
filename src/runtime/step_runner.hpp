// SPDX-License-Identifier: Apache-2.0
#pragma once
// StepRunner: launches the steps of a run on up to N host threads (the session's inter-op threads) as soon
// as the steps they depend on have been launched. The calling thread takes part; N - 1 workers wait for
// runs. With N = 1 the steps launch in schedule order on the calling thread, with no locking.
//
// Invariants: a step launches once, after every step in its `after` has returned from its launch; no step
// launches after one has thrown; run() returns only when no launch is in progress.

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "runtime/executable.hpp"

namespace tp::runtime {

class StepRunner {
 public:
  explicit StepRunner(std::size_t threads);  // threads >= 1
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  std::size_t threads() const noexcept { return workers_.size() + 1; }

  // Launches every step with `launch(index)`; rethrows the first exception a launch raised, once the
  // launches in progress have returned. Runs are not reentrant (the session serialises them).
  void run(const std::vector<Step>& steps, const std::function<void(std::size_t)>& launch);

 private:
  struct Job {
    const std::vector<Step>* steps = nullptr;
    const std::function<void(std::size_t)>* launch = nullptr;
    std::vector<std::size_t> waiting_for{};  // per step: how many of its `after` have not launched yet
    std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready{};  // schedule order first
    std::size_t launched = 0;
    std::size_t in_progress = 0;
    std::exception_ptr error{};
    bool over() const { return in_progress == 0 && (error != nullptr || launched == steps->size()); }
  };

  void worker_loop();
  // Takes a ready step of `job`, launches it with the lock released, and records the outcome.
  void launch_one(Job& job, std::unique_lock<std::mutex>& lock);

  std::mutex mutex_;                 // guards job_, stopping_ and the Job it points to
  std::condition_variable changed_;  // a step became ready or finished, a run began, or the runner stops
  Job* job_ = nullptr;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tp::runtime

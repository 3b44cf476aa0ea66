// SPDX-License-Identifier: Apache-2.0
#include "runtime/step_runner.hpp"

#include "tensorpool/core/error.hpp"

namespace tp::runtime {

StepRunner::StepRunner(std::size_t threads) {
  if (threads == 0) TP_THROW(InvalidArgument, "session", "inter_op_threads = 0; a run needs at least one thread");
  for (std::size_t worker = 1; worker < threads; ++worker) workers_.emplace_back([this] { worker_loop(); });
}

StepRunner::~StepRunner() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void StepRunner::worker_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock,
                  [this] { return stopping_ || (job_ != nullptr && job_->error == nullptr && !job_->ready.empty()); });
    if (stopping_) return;
    launch_one(*job_, lock);
  }
}

void StepRunner::launch_one(Job& job, std::unique_lock<std::mutex>& lock) {
  const std::size_t index = job.ready.top();
  job.ready.pop();
  ++job.in_progress;
  lock.unlock();
  std::exception_ptr error;
  try {
    (*job.launch)(index);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  --job.in_progress;
  if (error != nullptr) {
    if (job.error == nullptr) job.error = error;
  } else {
    ++job.launched;
    for (std::size_t next : (*job.steps)[index].successors) {
      if (--job.waiting_for[next] == 0) job.ready.push(next);
    }
  }
  changed_.notify_all();
}

void StepRunner::run(const std::vector<Step>& steps, const std::function<void(std::size_t)>& launch) {
  if (workers_.empty()) {  // schedule order is a valid order: every `after` entry is an earlier step
    for (std::size_t index = 0; index < steps.size(); ++index) launch(index);
    return;
  }
  Job job;
  job.steps = &steps;
  job.launch = &launch;
  job.waiting_for.reserve(steps.size());
  for (std::size_t index = 0; index < steps.size(); ++index) {
    job.waiting_for.push_back(steps[index].after.size());
    if (steps[index].after.empty()) job.ready.push(index);
  }
  std::unique_lock lock(mutex_);
  job_ = &job;
  changed_.notify_all();
  while (!job.over()) {
    if (job.error == nullptr && !job.ready.empty()) {
      launch_one(job, lock);
    } else if (job.in_progress == 0) {  // nothing ready, nothing running, steps left: `after` has a cycle
      job.error = std::make_exception_ptr(
          InvalidArgument("[session] internal: the steps' dependencies form a cycle; no step can launch"));
    } else {
      changed_.wait(lock);
    }
  }
  job_ = nullptr;
  lock.unlock();
  if (job.error != nullptr) std::rethrow_exception(job.error);
}

}  // namespace tp::runtime

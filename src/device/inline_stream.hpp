// SPDX-License-Identifier: Apache-2.0
#pragma once
// InlineStream: a stream whose tasks run in the enqueuing thread, at once (the cpu backend). Host threads
// sharing it are serialised, so its order is the order in which enqueue() calls return; a task's exception
// propagates from enqueue(). A task may enqueue on the same stream (it runs nested, at once).

#include <mutex>

#include "tensorpool/device/stream.hpp"

namespace tp::device {

class InlineStream final : public Stream {
 public:
  InlineStream(Device& device, std::size_t index) : Stream(device, index) {}

 private:
  void do_enqueue(Task task) override {
    std::lock_guard lock(mutex_);
    run(task, /*propagate=*/true);
  }
  bool do_idle() const override { return true; }
  void wait_idle() override { std::lock_guard lock(mutex_); }

  std::recursive_mutex mutex_;  // held while a task runs
};

}  // namespace tp::device

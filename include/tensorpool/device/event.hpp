// SPDX-License-Identifier: Apache-2.0
#pragma once
// Event: a point in one stream's order (as a CUDA event). It completes once its stream has run everything
// enqueued before the record. Copies of an Event share one state; a default-constructed Event is complete.
// Thread-safe.
//
// An event may also carry a backend-native handle (a marker cl_event, later a cudaEvent_t), type-erased, with
// an owner tag naming what the handle belongs to (an OpenCL context): a stream whose backend recognises the
// owner waits on the device instead of blocking a host thread. Only streams (Stream's protected helpers)
// create, complete or read such events; the handle and its owner are fixed when the event is created. The
// host-side completion above still holds for every event, so any stream and the host can wait on any event.

#include <memory>

namespace tp::device {

class Event {
 public:
  Event() = default;

  // True once complete. Never blocks.
  [[nodiscard]] bool query() const;
  // Blocks the calling thread until complete: polls for a short while (a hand-off between streams is often
  // that close), then sleeps.
  void synchronize() const;
  // Blocks the calling thread until complete, asleep from the start: for a waiter whose wake-up latency is
  // hidden behind work queued after the event (a host thread with a later run in flight), where polling
  // would only take a core from the threads doing that work.
  void sleep_until_complete() const;

 private:
  friend class Stream;
  struct State;
  // A pending event, with `native` (and its `owner` tag) when the recording backend has a handle.
  static Event pending(std::shared_ptr<void> native = nullptr, const void* owner = nullptr);
  void complete() const noexcept;
  // The native handle when the event carries one whose owner tag is `owner`, else null.
  void* native(const void* owner) const noexcept;

  std::shared_ptr<State> state_;  // null: complete from the start
};

}  // namespace tp::device

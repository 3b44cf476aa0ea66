#pragma once
// Event: a point in one stream's order (as a CUDA event). It completes once its stream has run everything
// enqueued before the record. Copies of an Event share one state; a default-constructed Event is complete.
// Thread-safe.

#include <memory>

namespace tp::device {

class Event {
 public:
  Event() = default;

  // True once complete. Never blocks.
  bool query() const;
  // Blocks the calling thread until complete.
  void synchronize() const;

 private:
  friend class Stream;
  struct State;
  static Event pending();
  void complete() const noexcept;

  std::shared_ptr<State> state_;  // null: complete from the start
};

}  // namespace tp::device

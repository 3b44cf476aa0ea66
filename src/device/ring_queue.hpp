// SPDX-License-Identifier: Apache-2.0
#pragma once
// RingQueue<T>: a FIFO queue in one growing ring of slots. Unlike std::deque, which gives an element of half
// a kilobyte or more a heap node of its own, it allocates only when it grows past its largest size so far:
// a stream's queue of tasks (StreamTask keeps its callable inline) then allocates nothing per task. Not
// thread-safe; T must be default-constructible and nothrow move-assignable.

#include <cstddef>
#include <utility>
#include <vector>

namespace tp::device::detail {

template <typename T>
class RingQueue {
 public:
  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }

  void push_back(T&& value) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(value);
    ++size_;
  }

  // Precondition for both: !empty().
  T& front() noexcept { return slots_[head_]; }
  // Leaves the popped slot moved-from (a StreamTask's captures are destroyed by whoever took it).
  void pop_front() noexcept {
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }

 private:
  // Invariant: slots_.size() is 0 or a power of two; the elements are slots_[(head_ + i) & mask] for i < size_.
  void grow() {
    std::vector<T> bigger(slots_.empty() ? kFirstCapacity : 2 * slots_.size());
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  static constexpr std::size_t kFirstCapacity = 16;

  std::vector<T> slots_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace tp::device::detail

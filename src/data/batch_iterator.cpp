// SPDX-License-Identifier: Apache-2.0
#include <utility>

#include "data/iterator_state.hpp"
#include "tensorpool/data/batch.hpp"

namespace tp::data {

namespace detail {

IteratorState::IteratorState(BatchAssembler batch_assembler, std::int64_t epoch_index, std::int64_t start_batch,
                             std::size_t prefetch_depth)
    : assembler(std::move(batch_assembler)),
      epoch(epoch_index),
      end(assembler.num_batches()),
      depth(prefetch_depth),
      next_index(start_batch) {
  if (depth > 0) producer_ = std::thread([this, start_batch] { produce(start_batch); });
}

IteratorState::~IteratorState() {
  if (!producer_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  producer_.join();
}

void IteratorState::produce(std::int64_t from) noexcept {
  try {
    for (std::int64_t index = from; index < end; ++index) {
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [this] { return stop_ || queue_.size() < depth; });
        if (stop_) break;
      }
      Batch batch = assembler.assemble(index);  // outside the lock: the consumer keeps taking batches
      {
        std::lock_guard lock(mutex_);
        if (stop_) break;
        queue_.push_back(std::move(batch));
      }
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard lock(mutex_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard lock(mutex_);
    producer_done_ = true;
  }
  changed_.notify_all();
}

std::optional<Batch> IteratorState::next() {
  if (depth == 0) {
    if (error_) std::rethrow_exception(error_);
    if (next_index >= end) return std::nullopt;
    try {
      Batch batch = assembler.assemble(next_index);
      ++next_index;
      return batch;
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
  }
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !queue_.empty() || producer_done_; });
  if (queue_.empty()) {
    if (error_) std::rethrow_exception(error_);
    return std::nullopt;
  }
  Batch batch = std::move(queue_.front());
  queue_.pop_front();
  lock.unlock();
  changed_.notify_all();  // room for the producer
  ++next_index;
  return batch;
}

std::size_t IteratorState::ready() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

}  // namespace detail

BatchIterator::BatchIterator(std::unique_ptr<detail::IteratorState> state) : state_(std::move(state)) {}
BatchIterator::~BatchIterator() = default;
BatchIterator::BatchIterator(BatchIterator&&) noexcept = default;
BatchIterator& BatchIterator::operator=(BatchIterator&&) noexcept = default;

std::optional<Batch> BatchIterator::next() { return state_->next(); }
std::int64_t BatchIterator::epoch() const noexcept { return state_->epoch; }
std::int64_t BatchIterator::next_index() const noexcept { return state_->next_index; }
std::int64_t BatchIterator::end_index() const noexcept { return state_->end; }
std::size_t BatchIterator::ready() const { return state_->ready(); }

}  // namespace tp::data

// SPDX-License-Identifier: Apache-2.0
#pragma once
// IteratorState: what a BatchIterator owns. Without prefetch, next() assembles the batch itself. With
// prefetch depth n > 0, a producer thread assembles batches in index order into `queue`, waiting while it
// holds n; next() takes them in order.
//
// Invariants (prefetch): queue holds batches next_index, next_index + 1, ... consecutively, at most `depth`
// of them; once producer_done, the producer adds nothing more, and `error` (if set) is the failure of the
// batch right after the last one queued. stop is set only by the destructor, which then joins the producer:
// the producer checks it before assembling each batch and before queuing it, so it ends within one batch.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "data/batch_assembler.hpp"

namespace tp::data::detail {

struct IteratorState {
  IteratorState(BatchAssembler batch_assembler, std::int64_t epoch_index, std::int64_t start_batch,
                std::size_t prefetch_depth);
  ~IteratorState();
  IteratorState(const IteratorState&) = delete;
  IteratorState& operator=(const IteratorState&) = delete;

  std::optional<Batch> next();
  std::size_t ready() const;

  const BatchAssembler assembler;
  const std::int64_t epoch;
  const std::int64_t end;
  const std::size_t depth;
  std::int64_t next_index;  // consumer side only

 private:
  void produce(std::int64_t from) noexcept;

  mutable std::mutex mutex_;  // guards queue_, stop_, producer_done_, error_
  std::condition_variable changed_;
  std::deque<Batch> queue_;
  bool stop_ = false;
  bool producer_done_ = false;
  std::exception_ptr error_;  // sticky: next() rethrows it once the queue before it is consumed
  std::thread producer_;      // declared last: started once everything above exists
};

}  // namespace tp::data::detail

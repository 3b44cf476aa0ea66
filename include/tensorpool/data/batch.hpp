// SPDX-License-Identifier: Apache-2.0
#pragma once
// Batch and BatchIterator: one epoch of a Dataset, batch by batch.
//
// A Batch's tensors live on the dataset's staging device (a host-accessible device, cpu:0 by default) in
// the dataset's pinned staging memory (see dataset.hpp). They stay valid after the iterator is gone, but not
// after that device: drop batches before the DeviceManager that owns it.
//
// With prefetch(n) a background thread assembles the next n batches while the consumer works on the current
// one. Guarantees:
//   - the batches (contents, order, size, index) are exactly those of the same iterator without prefetch;
//   - destroying the iterator at any point (a full queue, a producer mid-batch) stops and joins the thread
//     and frees every queued batch: no hang, no leak;
//   - an exception thrown while assembling a batch (a custom map, running out of memory) is rethrown by the
//     consumer's next() call that would have returned that batch, after the batches before it; the iterator
//     then keeps rethrowing it.
// A BatchIterator is used from one thread at a time; a moved-from one may only be destroyed or assigned to.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "tensorpool/core/tensor.hpp"

namespace tp::data {

struct Batch {
  Tensor features{};       // float32 [size, example dims...]
  Tensor labels{};         // int32 [size]; float32 [size, target dims...] for Dataset::with_targets
  std::int64_t size = 0;   // examples in this batch: the batch size, or fewer for the last one
  std::int64_t index = 0;  // position in the epoch: 0 .. batches_per_epoch() - 1
};

namespace detail {
struct IteratorState;
}

class BatchIterator {
 public:
  explicit BatchIterator(std::unique_ptr<detail::IteratorState> state);
  ~BatchIterator();  // stops and joins the prefetch thread, if any
  BatchIterator(BatchIterator&&) noexcept;
  BatchIterator& operator=(BatchIterator&&) noexcept;

  // The next batch, or nullopt after the last one of the epoch (for this shard).
  std::optional<Batch> next();

  [[nodiscard]] std::int64_t epoch() const noexcept;
  // The index of the batch next() returns next (starts at the start_batch the iterator was made with).
  [[nodiscard]] std::int64_t next_index() const noexcept;
  // One past the last batch index: the dataset's batches_per_epoch().
  [[nodiscard]] std::int64_t end_index() const noexcept;
  // Batches assembled and waiting (always 0 without prefetch); at most the prefetch depth.
  [[nodiscard]] std::size_t ready() const;

 private:
  std::unique_ptr<detail::IteratorState> state_;
};

}  // namespace tp::data

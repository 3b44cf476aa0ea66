// SPDX-License-Identifier: Apache-2.0
#include "distribute/peer_collectives.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "ops/peer_sum.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/distribute/communicator.hpp"

namespace tp::distribute {

namespace {

Tensor range(const Tensor& tensor, std::int64_t begin, std::int64_t end) {
  return tensor.reshape(Shape{tensor.num_elements()}).slice(begin, end);
}

// Sums [begin, end) of the flat layout over participants on `stream` into the same range of tensors[rank],
// and of every tensor when `everywhere`; the addends are the tensors themselves (in place) or, with parts,
// the pieces of the parts that the range covers.
void sum_range(std::span<const Tensor> tensors, std::span<const std::vector<Tensor>> parts, std::size_t rank,
               std::int64_t begin, std::int64_t end, bool everywhere, device::Stream& stream) {
  auto sum = [&](std::int64_t low, std::int64_t high, auto&& addend_of) {
    std::vector<Tensor> addends, outputs = {range(tensors[rank], low, high)};  // outputs[0] runs the kernel
    for (std::size_t other = 0; other < tensors.size(); ++other) {
      addends.push_back(addend_of(other));
      if (everywhere && other != rank) outputs.push_back(range(tensors[other], low, high));
    }
    ops::sum_across_peers(outputs, addends, {.stream = &stream});
  };
  if (parts.empty()) return sum(begin, end, [&](std::size_t other) { return range(tensors[other], begin, end); });
  std::int64_t offset = 0;
  for (std::size_t part = 0; part < parts[rank].size(); ++part) {
    const std::int64_t elements = parts[rank][part].num_elements();
    const std::int64_t low = std::max(begin, offset);
    const std::int64_t high = std::min(end, offset + elements);
    if (low < high) {
      sum(low, high, [&](std::size_t other) { return range(parts[other][part], low - offset, high - offset); });
    }
    offset += elements;
  }
}

// Participant r sums chunk r over all participants (after every participant's earlier work) into chunk r of
// tensors[r], and of every tensor when `everywhere`; then each participant's stream waits for every other's
// kernel, which read (and wrote) its memory.
void sum_chunks(std::span<const Tensor> tensors, std::span<const std::vector<Tensor>> parts, bool everywhere) {
  const std::size_t participants = tensors.size();
  if (participants <= 1 && parts.empty()) return;
  const std::int64_t elements = tensors[0].num_elements();
  std::vector<device::Event> ready;
  for (const Tensor& tensor : tensors) ready.push_back(tensor.device().stream(0).record());
  std::vector<std::pair<std::size_t, device::Event>> summed;
  for (std::size_t rank = 0; rank < participants; ++rank) {
    const auto [begin, end] = Communicator::chunk(elements, participants, rank);
    if (begin == end) continue;
    device::Stream& stream = tensors[rank].device().stream(0);
    for (std::size_t other = 0; other < participants; ++other) {
      if (other != rank) stream.wait(ready[other]);
    }
    sum_range(tensors, parts, rank, begin, end, everywhere, stream);
    summed.emplace_back(rank, stream.record());
  }
  for (std::size_t rank = 0; rank < participants; ++rank) {
    for (const auto& [summer, event] : summed) {
      if (summer != rank) tensors[rank].device().stream(0).wait(event);
    }
  }
}

}  // namespace

bool all_peers(std::span<const Tensor> tensors) {
  for (const Tensor& from : tensors) {
    for (const Tensor& to : tensors) {
      if (&from != &to && !device::peer_accessible(from.device(), to.device())) return false;
    }
  }
  return true;
}

void peer_all_reduce(std::span<const Tensor> tensors) { sum_chunks(tensors, {}, true); }

void peer_reduce_scatter(std::span<const Tensor> tensors) { sum_chunks(tensors, {}, false); }

void peer_reduce_parts(std::span<const std::vector<Tensor>> parts, std::span<const Tensor> buckets, bool everywhere) {
  sum_chunks(buckets, parts, everywhere);
}

// All copies start together; device::copy_concurrently orders each after its owner's earlier work and the
// owner's later work after the copy.
void peer_all_gather(std::span<const Tensor> tensors) {
  const std::size_t participants = tensors.size();
  const std::int64_t elements = tensors[0].num_elements();
  std::vector<device::CopyRequest> copies;
  for (std::size_t owner = 0; owner < participants; ++owner) {
    const auto [begin, end] = Communicator::chunk(elements, participants, owner);
    if (begin == end) continue;
    const Tensor source = range(tensors[owner], begin, end);
    for (std::size_t rank = 0; rank < participants; ++rank) {
      if (rank == owner) continue;
      const Tensor target = range(tensors[rank], begin, end);
      copies.push_back({&source.device().stream(0), source.buffer(), source.offset_bytes(), &target.device().stream(0),
                        target.buffer(), target.offset_bytes(), target.nbytes()});
    }
  }
  device::copy_concurrently(copies);
}

}  // namespace tp::distribute

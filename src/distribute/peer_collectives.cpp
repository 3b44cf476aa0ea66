#include "distribute/peer_collectives.hpp"

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

// Participant r sums chunk r over all participants (after every participant's earlier work) into chunk r of
// tensors[r], and of every tensor when `everywhere`; then each participant's stream waits for every other's
// kernel, which read (and wrote) its tensor.
void sum_chunks(std::span<const Tensor> tensors, bool everywhere) {
  const std::size_t participants = tensors.size();
  if (participants <= 1) return;
  const std::int64_t elements = tensors[0].num_elements();
  std::vector<device::Event> ready;
  for (const Tensor& tensor : tensors) ready.push_back(tensor.device().stream(0).record());
  std::vector<std::pair<std::size_t, device::Event>> summed;
  for (std::size_t rank = 0; rank < participants; ++rank) {
    const auto [begin, end] = Communicator::chunk(elements, participants, rank);
    if (begin == end) continue;
    device::Stream& stream = tensors[rank].device().stream(0);
    std::vector<Tensor> parts;
    for (std::size_t other = 0; other < participants; ++other) {
      if (other != rank) stream.wait(ready[other]);
      parts.push_back(range(tensors[other], begin, end));
    }
    std::vector<Tensor> outputs = {parts[rank]};  // outputs[0] on this device: it runs the kernel
    for (std::size_t other = 0; everywhere && other < participants; ++other) {
      if (other != rank) outputs.push_back(parts[other]);
    }
    ops::sum_across_peers(outputs, parts, {.stream = &stream});
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

void peer_all_reduce(std::span<const Tensor> tensors) { sum_chunks(tensors, true); }

void peer_reduce_scatter(std::span<const Tensor> tensors) { sum_chunks(tensors, false); }

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

// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/distribute/communicator.hpp"

#include <algorithm>
#include <vector>

#include "distribute/peer_collectives.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/distribute/nccl.hpp"
#include "tensorpool/ops/elementwise.hpp"

namespace tp::distribute {

namespace {

// The elements [begin, end) of a tensor, as a flat view.
Tensor range(const Tensor& tensor, std::int64_t begin, std::int64_t end) {
  return tensor.reshape(Shape{tensor.num_elements()}).slice(begin, end);
}

// source -> target in stream order on both devices (through host staging between devices).
void send(const Tensor& source, const Tensor& target) {
  device::copy(source.device().stream(0), source.buffer(), source.offset_bytes(), target.device().stream(0),
               target.buffer(), target.offset_bytes(), target.nbytes());
}

// The parts copied back to back into the bucket, on its device's stream 0.
void pack(const std::vector<Tensor>& parts, const Tensor& bucket) {
  device::Stream& stream = bucket.device().stream(0);
  std::int64_t offset = 0;
  for (const Tensor& part : parts) {
    const Tensor slot = range(bucket, offset, offset + part.num_elements());
    device::copy(stream, part.buffer(), part.offset_bytes(), stream, slot.buffer(), slot.offset_bytes(), slot.nbytes());
    offset += part.num_elements();
  }
}

// Every participant has the same parts (shapes), on its bucket's device in its dtype, filling it exactly.
void check_parts(std::string_view communicator, std::string_view collective, std::span<const std::vector<Tensor>> parts,
                 std::span<const Tensor> buckets) {
  if (parts.size() != buckets.size()) {
    TP_THROW(InvalidArgument, "distribute", communicator, " ", collective, ": parts of ", parts.size(),
             " participants for ", buckets.size(), " buckets");
  }
  for (std::size_t index = 0; index < parts.size(); ++index) {
    if (parts[index].size() != parts[0].size()) {
      TP_THROW(InvalidArgument, "distribute", communicator, " ", collective, ": participant ", index, " has ",
               parts[index].size(), " parts but participant 0 has ", parts[0].size());
    }
    std::int64_t packed = 0;
    for (std::size_t part = 0; part < parts[index].size(); ++part) {
      const Tensor& tensor = parts[index][part];
      if (&tensor.device() != &buckets[index].device() || tensor.dtype() != buckets[index].dtype() ||
          tensor.shape() != parts[0][part].shape()) {
        TP_THROW(InvalidArgument, "distribute", communicator, " ", collective, ": part ", part, " of participant ",
                 index, " is ", name_of(tensor.dtype()), tensor.shape(), " on ", tensor.device().name(), "; expected ",
                 name_of(buckets[index].dtype()), parts[0][part].shape(), " on its bucket's device ",
                 buckets[index].device().name());
      }
      packed += tensor.num_elements();
    }
    if (packed != buckets[index].num_elements()) {
      TP_THROW(InvalidArgument, "distribute", communicator, " ", collective, ": participant ", index, "'s parts hold ",
               packed, " elements but its bucket ", buckets[index].num_elements());
    }
  }
}

void accumulate(const Tensor& target, const Tensor& addend) {
  ops::add_scaled(target, 1.0, addend, {.stream = &target.device().stream(0)});
}

struct Transfer {
  Tensor source, target;
};

// The transfers of one ring step, started together (device::copy_concurrently).
void send_all(const std::vector<Transfer>& transfers) {
  std::vector<device::CopyRequest> copies;
  for (const auto& [source, target] : transfers) {
    copies.push_back({&source.device().stream(0), source.buffer(), source.offset_bytes(), &target.device().stream(0),
                      target.buffer(), target.offset_bytes(), target.nbytes()});
  }
  device::copy_concurrently(copies);
}

struct PeerSum {
  Tensor sum, addend;  // sum += addend, addend on a device that sum's can read directly
};

// The reductions of one ring step between peers, each reading its neighbour's chunk in place (one pass over
// the chunk instead of a copy into scratch and a second pass to add it), all started together as send_all's
// copies: each waits for its addend's producer, and each addend's later writers wait for its reader.
void reduce_from_peers(const std::vector<PeerSum>& sums) {
  std::vector<device::Event> ready;
  for (const PeerSum& peer : sums) ready.push_back(peer.addend.device().stream(0).record());
  std::vector<device::Event> done;
  for (std::size_t index = 0; index < sums.size(); ++index) {
    device::Stream& stream = sums[index].sum.device().stream(0);
    stream.wait(ready[index]);
    ops::add_scaled_from_peer(sums[index].sum, 1.0, sums[index].addend, {.stream = &stream});
    done.push_back(stream.record());
  }
  for (std::size_t index = 0; index < sums.size(); ++index) sums[index].addend.device().stream(0).wait(done[index]);
}

// Ring over R participants, chunks as Communicator::chunk. Reduce-scatter: in step s, participant r sends
// chunk (r - s - 1) mod R to r + 1, which adds it to its own; after R - 1 steps participant r holds the full
// sum of chunk r. All-gather: in step s participant r passes chunk (r - s) mod R on to r + 1. Each device
// sends 2(R-1)/R of the data for an all-reduce. When every participant reaches every other's memory directly
// (sim devices of one process), the direct collectives of peer_collectives.hpp replace the ring: one hand-off
// between the devices' streams before and one after, instead of one per ring step (2(R-1) for an all-reduce);
// the scratch then goes unused (its size is still planned: callers size it before they know the devices).
class RingCommunicator final : public Communicator {
 public:
  std::string_view name() const noexcept override { return "ring"; }
  std::int64_t scratch_elements(std::int64_t elements, std::size_t participants, std::size_t) const override {
    const auto count = static_cast<std::int64_t>(participants);
    return participants <= 1 ? 0 : (elements + count - 1) / count;
  }

 private:
  void do_all_reduce(std::span<const Tensor> tensors, std::span<const Tensor> scratch) override {
    if (all_peers(tensors)) return peer_all_reduce(tensors);
    do_reduce_scatter(tensors, scratch);
    do_all_gather(tensors);
  }

  bool do_reduce_parts(std::span<const std::vector<Tensor>> parts, std::span<const Tensor> buckets,
                       bool everywhere) override {
    if (!all_peers(buckets)) return false;
    peer_reduce_parts(parts, buckets, everywhere);
    return true;
  }

  static std::int64_t wrap(std::int64_t value, std::int64_t participants) {
    return ((value % participants) + participants) % participants;
  }

  // Each step's reductions start together: between neighbours that are peers (a ring mixing peers with other
  // devices) each participant adds its neighbour's chunk in place (reduce_from_peers); otherwise the chunks
  // travel to scratch first (send_all), then are added.
  void do_reduce_scatter(std::span<const Tensor> tensors, std::span<const Tensor> scratch) override {
    if (all_peers(tensors)) return peer_reduce_scatter(tensors);
    const auto participants = static_cast<std::int64_t>(tensors.size());
    const std::int64_t elements = tensors[0].num_elements();
    for (std::int64_t step = 0; step + 1 < participants; ++step) {
      std::vector<PeerSum> peers;
      std::vector<Transfer> transfers;
      std::vector<Tensor> sums;
      for (std::int64_t rank = 0; rank < participants; ++rank) {
        const auto [begin, end] =
            chunk(elements, tensors.size(), static_cast<std::size_t>(wrap(rank - step - 1, participants)));
        if (begin == end) continue;
        const auto next = static_cast<std::size_t>(wrap(rank + 1, participants));
        const Tensor source = range(tensors[static_cast<std::size_t>(rank)], begin, end);
        const Tensor sum = range(tensors[next], begin, end);
        if (device::peer_accessible(source.device(), sum.device())) {
          peers.push_back({sum, source});
        } else {
          transfers.push_back({source, range(scratch[next], 0, end - begin)});
          sums.push_back(sum);
        }
      }
      reduce_from_peers(peers);
      send_all(transfers);
      for (std::size_t index = 0; index < transfers.size(); ++index) accumulate(sums[index], transfers[index].target);
    }
  }

  void do_all_gather(std::span<const Tensor> tensors) override {
    if (all_peers(tensors)) return peer_all_gather(tensors);
    const auto participants = static_cast<std::int64_t>(tensors.size());
    const std::int64_t elements = tensors[0].num_elements();
    for (std::int64_t step = 0; step + 1 < participants; ++step) {
      std::vector<Transfer> transfers;
      for (std::int64_t rank = 0; rank < participants; ++rank) {
        const auto [begin, end] =
            chunk(elements, tensors.size(), static_cast<std::size_t>(wrap(rank - step, participants)));
        if (begin == end) continue;
        const auto next = static_cast<std::size_t>(wrap(rank + 1, participants));
        transfers.push_back(
            {range(tensors[static_cast<std::size_t>(rank)], begin, end), range(tensors[next], begin, end)});
      }
      send_all(transfers);
    }
  }
};

// Everything to participant 0, summed there, then sent back: the simple alternative to the ring.
class ReduceToOneCommunicator final : public Communicator {
 public:
  std::string_view name() const noexcept override { return "reduce_to_one"; }
  std::int64_t scratch_elements(std::int64_t elements, std::size_t participants, std::size_t index) const override {
    return participants > 1 && index == 0 ? elements : 0;
  }

 private:
  void reduce_into_first(std::span<const Tensor> tensors, std::span<const Tensor> scratch) {
    if (tensors.size() <= 1) return;  // nothing to receive (and no scratch to receive into)
    const std::int64_t elements = tensors[0].num_elements();
    const Tensor received = range(scratch[0], 0, elements);
    const Tensor total = range(tensors[0], 0, elements);
    for (std::size_t rank = 1; rank < tensors.size(); ++rank) {
      send(range(tensors[rank], 0, elements), received);
      accumulate(total, received);
    }
  }

  void do_all_reduce(std::span<const Tensor> tensors, std::span<const Tensor> scratch) override {
    reduce_into_first(tensors, scratch);
    const std::int64_t elements = tensors[0].num_elements();
    for (std::size_t rank = 1; rank < tensors.size(); ++rank) {
      send(range(tensors[0], 0, elements), range(tensors[rank], 0, elements));
    }
  }

  void do_reduce_scatter(std::span<const Tensor> tensors, std::span<const Tensor> scratch) override {
    reduce_into_first(tensors, scratch);
    const std::int64_t elements = tensors[0].num_elements();
    for (std::size_t rank = 1; rank < tensors.size(); ++rank) {
      const auto [begin, end] = chunk(elements, tensors.size(), rank);
      if (begin < end) send(range(tensors[0], begin, end), range(tensors[rank], begin, end));
    }
  }

  void do_all_gather(std::span<const Tensor> tensors) override {
    const std::int64_t elements = tensors[0].num_elements();
    for (std::size_t rank = 1; rank < tensors.size(); ++rank) {
      const auto [begin, end] = chunk(elements, tensors.size(), rank);
      if (begin < end) send(range(tensors[rank], begin, end), range(tensors[0], begin, end));
    }
    for (std::size_t rank = 1; rank < tensors.size(); ++rank) {
      send(range(tensors[0], 0, elements), range(tensors[rank], 0, elements));
    }
  }
};

}  // namespace

std::pair<std::int64_t, std::int64_t> Communicator::chunk(std::int64_t elements, std::size_t participants,
                                                          std::size_t index) {
  const auto count = static_cast<std::int64_t>(std::max<std::size_t>(participants, 1));
  const std::int64_t size = (elements + count - 1) / count;
  const std::int64_t begin = std::min(elements, static_cast<std::int64_t>(index) * size);
  return {begin, std::min(elements, begin + size)};
}

void Communicator::do_all_reduce(std::span<const Tensor> tensors, std::span<const Tensor> scratch) {
  do_reduce_scatter(tensors, scratch);
  do_all_gather(tensors);
}

void Communicator::do_broadcast(std::span<const Tensor> tensors, std::size_t root) {
  std::vector<Transfer> transfers;
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    if (index != root) transfers.push_back({tensors[root], tensors[index]});
  }
  send_all(transfers);
}

void Communicator::check(std::string_view collective, std::span<const Tensor> tensors, std::span<const Tensor> scratch,
                         bool needs_scratch) const {
  if (tensors.empty()) TP_THROW(InvalidArgument, "distribute", name(), " ", collective, ": no tensors");
  if (needs_scratch && scratch.size() != tensors.size()) {
    TP_THROW(InvalidArgument, "distribute", name(), " ", collective, ": ", tensors.size(), " tensors but ",
             scratch.size(), " scratch buffers");
  }
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    const Tensor& tensor = tensors[index];
    if (tensor.dtype() != tensors[0].dtype() || tensor.num_elements() != tensors[0].num_elements()) {
      TP_THROW(InvalidArgument, "distribute", name(), " ", collective, ": participant ", index, " holds ",
               name_of(tensor.dtype()), tensor.shape(), " but participant 0 holds ", name_of(tensors[0].dtype()),
               tensors[0].shape());
    }
    if (!needs_scratch) continue;
    const std::int64_t needed = scratch_elements(tensor.num_elements(), tensors.size(), index);
    if (scratch[index].num_elements() < needed || &scratch[index].device() != &tensor.device() ||
        scratch[index].dtype() != tensor.dtype()) {
      TP_THROW(InvalidArgument, "distribute", name(), " ", collective, ": participant ", index, " needs ", needed,
               " elements of ", name_of(tensor.dtype()), " scratch on ", tensor.device().name());
    }
  }
}

void Communicator::all_reduce(std::span<const Tensor> tensors, std::span<const Tensor> scratch) {
  check("all_reduce", tensors, scratch, true);
  do_all_reduce(tensors, scratch);
}

void Communicator::reduce_scatter(std::span<const Tensor> tensors, std::span<const Tensor> scratch) {
  check("reduce_scatter", tensors, scratch, true);
  do_reduce_scatter(tensors, scratch);
}

bool Communicator::do_reduce_parts(std::span<const std::vector<Tensor>>, std::span<const Tensor>, bool) {
  return false;
}

void Communicator::all_reduce_parts(std::span<const std::vector<Tensor>> parts, std::span<const Tensor> buckets,
                                    std::span<const Tensor> scratch) {
  reduce_parts("all_reduce", parts, buckets, scratch, true);
}

void Communicator::reduce_scatter_parts(std::span<const std::vector<Tensor>> parts, std::span<const Tensor> buckets,
                                        std::span<const Tensor> scratch) {
  reduce_parts("reduce_scatter", parts, buckets, scratch, false);
}

void Communicator::reduce_parts(std::string_view collective, std::span<const std::vector<Tensor>> parts,
                                std::span<const Tensor> buckets, std::span<const Tensor> scratch, bool everywhere) {
  check(collective, buckets, scratch, true);
  check_parts(name(), collective, parts, buckets);
  if (do_reduce_parts(parts, buckets, everywhere)) return;
  for (std::size_t index = 0; index < buckets.size(); ++index) pack(parts[index], buckets[index]);
  if (everywhere) {
    do_all_reduce(buckets, scratch);
  } else {
    do_reduce_scatter(buckets, scratch);
  }
}

void Communicator::all_gather(std::span<const Tensor> tensors) {
  check("all_gather", tensors, {}, false);
  do_all_gather(tensors);
}

void Communicator::broadcast(std::span<const Tensor> tensors, std::size_t root) {
  check("broadcast", tensors, {}, false);
  const std::size_t count = participants(tensors.size());
  if (root >= count) {
    TP_THROW(InvalidArgument, "distribute", name(), " broadcast: root ", root, " is not one of the ", count,
             " participants");
  }
  do_broadcast(tensors, root);
}

std::unique_ptr<Communicator> make_communicator(std::string_view algorithm) {
  if (algorithm == "ring") return std::make_unique<RingCommunicator>();
  if (algorithm == "reduce_to_one") return std::make_unique<ReduceToOneCommunicator>();
  if (algorithm == "mpi") return make_mpi_communicator();
  if (algorithm == "nccl") return make_nccl_communicator();
  TP_THROW(InvalidArgument, "distribute", "all-reduce algorithm '", algorithm,
           "' is not ring, reduce_to_one, mpi (across the workers of an mpirun job) or nccl (cuda devices on "
           "distinct GPUs)");
}

}  // namespace tp::distribute

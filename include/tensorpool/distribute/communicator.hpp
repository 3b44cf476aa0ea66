// SPDX-License-Identifier: Apache-2.0
#pragma once
// Communicator: collectives between replicas, one tensor per participant, each on its own device. In-process
// transports (between local devices): "ring" (reduce-scatter then all-gather, each device sending 2(R-1)/R of
// the data; when every participant reaches every other's memory directly, as sim devices do, the direct
// collectives instead: each device sums its chunk over all participants in place and stores it everywhere,
// one hand-off between the streams before and one after) and "reduce_to_one" (everything to participant 0,
// summed there, then broadcast back) as the simple alternative; "mpi" crosses processes (mpi.hpp); "nccl" runs
// NVIDIA's NCCL between cuda devices on distinct GPUs, in one process or across an MPI job (nccl.hpp).
//
// Stream order: a collective enqueues its copies and additions on each participant's device stream 0 and
// returns; work enqueued later on those streams sees the result, and the tensors stay alive until it has run.
// Every participant ends with bitwise the same values (each chunk is reduced once, then copied).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensorpool/core/tensor.hpp"

namespace tp::distribute {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string_view name() const noexcept = 0;

  // Elements of working space participant `index` of `participants` needs to all-reduce `elements` elements.
  [[nodiscard]] virtual std::int64_t scratch_elements(std::int64_t elements, std::size_t participants,
                                                      std::size_t index) const = 0;
  // In place: each tensor becomes the elementwise sum over all of them. Tensors share one floating dtype and
  // element count; scratch[i] lives on tensors[i]'s device with at least scratch_elements(...) elements.
  // Throws tp::InvalidArgument naming the mismatch.
  void all_reduce(std::span<const Tensor> tensors, std::span<const Tensor> scratch);
  // In place, on full-size tensors (as NCCL's in-place variants): afterwards chunk(n, R, r) of tensors[r] holds
  // the elementwise sum over participants of that chunk; the rest of every tensor is working space. Same
  // requirements as all_reduce (scratch included).
  void reduce_scatter(std::span<const Tensor> tensors, std::span<const Tensor> scratch);
  // all_reduce and reduce_scatter of buckets that hold parts[i] (participant i's tensors: on buckets[i]'s
  // device, in its dtype, the same shapes for every participant) packed back to back, bucket i having exactly
  // their element count; the parts are left as they are. A transport that reads memory where it lies (the
  // direct collectives between peers) sums straight out of the parts into the buckets, saving a copy of every
  // byte; the others pack each participant's parts into its bucket on its stream 0, then run the collective.
  void all_reduce_parts(std::span<const std::vector<Tensor>> parts, std::span<const Tensor> buckets,
                        std::span<const Tensor> scratch);
  void reduce_scatter_parts(std::span<const std::vector<Tensor>> parts, std::span<const Tensor> buckets,
                            std::span<const Tensor> scratch);
  // In place: afterwards every tensor holds, in each chunk q, what tensors[q] held there. Same dtype and count.
  void all_gather(std::span<const Tensor> tensors);
  // In place: afterwards every tensor holds what tensors[root] held (every participant of the job: across
  // workers, `root` counts every worker's tensors, rank x local tensors + local index). Same dtype and count;
  // tp::InvalidArgument for a root outside the participants.
  void broadcast(std::span<const Tensor> tensors, std::size_t root);

  // Participant `index`'s chunk of `elements` split between `participants`: [index * S, min(n, (index + 1) * S))
  // with S = ceil(n / participants), as {begin, end} (empty at the tail when n < participants * S).
  [[nodiscard]] static std::pair<std::int64_t, std::int64_t> chunk(std::int64_t elements, std::size_t participants,
                                                                   std::size_t index);

 protected:
  // The root's tensor copied to every other local participant, all copies started together; a transport
  // across processes builds on it. `root` is checked against participants() first.
  virtual void do_broadcast(std::span<const Tensor> tensors, std::size_t root);
  // The participants of a collective over `local` tensors: those tensors in one process, every worker's
  // across an MPI job.
  virtual std::size_t participants(std::size_t local) const { return local; }

 private:
  virtual void do_reduce_scatter(std::span<const Tensor> tensors, std::span<const Tensor> scratch) = 0;
  virtual void do_all_gather(std::span<const Tensor> tensors) = 0;
  // Reduce-scatter then all-gather unless a transport does better.
  virtual void do_all_reduce(std::span<const Tensor> tensors, std::span<const Tensor> scratch);
  // Sums the parts straight into the buckets (every bucket's chunks when `everywhere`, chunk i of bucket i
  // otherwise) and returns true; returns false, having done nothing, when this transport cannot.
  virtual bool do_reduce_parts(std::span<const std::vector<Tensor>> parts, std::span<const Tensor> buckets,
                               bool everywhere);

  void check(std::string_view collective, std::span<const Tensor> tensors, std::span<const Tensor> scratch,
             bool needs_scratch) const;
  // all_reduce_parts (everywhere) or reduce_scatter_parts.
  void reduce_parts(std::string_view collective, std::span<const std::vector<Tensor>> parts,
                    std::span<const Tensor> buckets, std::span<const Tensor> scratch, bool everywhere);
};

// "ring", "reduce_to_one", "mpi" (tensorpool/distribute/mpi.hpp) or "nccl" (tensorpool/distribute/nccl.hpp:
// loads NCCL now); anything else throws tp::InvalidArgument naming it and the accepted names.
[[nodiscard]] std::unique_ptr<Communicator> make_communicator(std::string_view algorithm);

}  // namespace tp::distribute

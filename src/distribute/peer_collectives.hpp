// SPDX-License-Identifier: Apache-2.0
#pragma once
// Direct collectives between participants that all reach each other's memory (device::peer_accessible for
// every pair: sim devices of one process, as GPUs with peer access). Instead of the ring's 2(R-1) steps, each
// handing off between the devices' streams, every device works on its own chunk (Communicator::chunk) of
// every participant's tensor at once, so an all-reduce needs one hand-off before and one after:
//
//   all_reduce:     participant r sums chunk r over all participants, in participant order 0..R-1 (the
//                   same order for every chunk and size), and stores the sum into chunk r of every tensor.
//   reduce_scatter: the same sum, stored into chunk r of tensors[r] only.
//   all_gather:     participant r copies each other chunk q from tensors[q].
//
// Each chunk is reduced once, so every participant ends with bitwise the same values. Stream order as the
// Communicator's: the work is enqueued on each participant's stream 0 after its earlier work (each kernel
// waits for every participant's earlier work), and each participant's later work waits for every kernel that
// read or wrote its tensor. No working space.

#include <span>
#include <vector>

#include "tensorpool/core/tensor.hpp"

namespace tp::distribute {

// Whether every participant's device reaches every other's memory directly (false when two share a device).
bool all_peers(std::span<const Tensor> tensors);

void peer_all_reduce(std::span<const Tensor> tensors);
void peer_reduce_scatter(std::span<const Tensor> tensors);
void peer_all_gather(std::span<const Tensor> tensors);
// All-reduce (everywhere) or reduce-scatter of buckets that would hold parts[r] packed back to back, read
// straight out of the parts: the same sums, in the same order, without packing them first (the layout as
// Communicator::all_reduce_parts).
void peer_reduce_parts(std::span<const std::vector<Tensor>> parts, std::span<const Tensor> buckets, bool everywhere);

}  // namespace tp::distribute

// SPDX-License-Identifier: Apache-2.0
#pragma once
// A sum over tensors on several devices that reach each other's memory directly (device::peer_accessible:
// sim devices of one process, as GPUs with peer access): the direct collectives' reduction, where each
// device sums its chunk over every participant in one pass and stores it where it is needed.

#include <span>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

// Every tensor of `outputs` = inputs[0] + inputs[1] + ... + inputs[k-1], added left to right, each addition
// rounded once to the dtype (float32/float64 as add_scaled; float16/bfloat16 in float32 then rounded, as
// add_scaled's 16-bit kernel), so the result depends only on the inputs and their order, and every output
// holds bitwise the same values. One kernel on the context's stream of outputs[0]'s device (stream 0 by
// default), which reads the inputs and writes the outputs in place; each of them is on that device or on one
// it reaches directly. An output may be one of the inputs (the same view); otherwise no two of them overlap.
// Ordering with the other devices' streams is the caller's (as add_scaled_from_peer). Throws
// tp::InvalidArgument on no outputs or inputs, a dtype or shape mismatch, or a tensor out of reach.
void sum_across_peers(std::span<const Tensor> outputs, std::span<const Tensor> inputs, const OpContext& context = {});

}  // namespace tp::ops

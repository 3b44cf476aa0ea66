// SPDX-License-Identifier: Apache-2.0
#pragma once
// How a tensor op runs: on which stream, and how its output allocation is tagged.
//
// Every op in tp::ops comes in two forms: `op_into(inputs..., out, context)` writes a tensor the caller
// allocated (the executor's planned buffers), and `op(inputs..., context)` allocates its output on the inputs'
// device. Both validate shapes, dtypes and devices on the calling thread (tp::InvalidArgument naming the op
// and the shapes) and then enqueue the kernel on the stream as a task holding every tensor it touches, so
// inputs and outputs stay alive until it has run (stream-ordered reuse). Results are read with
// Tensor::to_vector(), which waits for the stream.

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/stream.hpp"

namespace tp::ops {

struct OpContext {
  device::Stream* stream = nullptr;  // null: stream 0 of the inputs' device
  TensorTag output{};                // tag of an allocated output; op and kind filled in when empty
};

}  // namespace tp::ops

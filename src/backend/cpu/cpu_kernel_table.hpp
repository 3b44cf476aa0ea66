// SPDX-License-Identifier: Apache-2.0
#pragma once
// The CPU backend's kernels for the tensor ops (tensorpool/ops/kernel_table.hpp). Each entry dispatches on
// dtype and enqueues one task on the stream that runs a kernel of backend/cpu/kernels/ on the tensors' host
// pointers. The cpu and sim backends register this one table: a sim device's memory is host memory that its
// streams' worker threads reach directly.

#include "tensorpool/ops/kernel_table.hpp"

namespace tp::backend::cpu {

// The table, built once at compile time (static storage, as register_kernels requires).
const ops::kernels::KernelTable& cpu_kernel_table() noexcept;

}  // namespace tp::backend::cpu

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The cuda backend's kernels (ops::kernels::KernelTable): CUDA kernels in kernels/*.cu and cuBLASLt products,
// enqueued on the op's CudaStream.

#include "tensorpool/ops/kernel_table.hpp"

namespace tp::backend::cuda {

const ops::kernels::KernelTable& cuda_kernel_table() noexcept;

}  // namespace tp::backend::cuda

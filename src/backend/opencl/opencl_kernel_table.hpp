// SPDX-License-Identifier: Apache-2.0
#pragma once
// The OpenCL backend's kernel table: every entry of ops::kernels::KernelTable, on kernels/*.cl and CLBlast. The
// device factory registers it for DeviceKind::opencl.

#include "tensorpool/ops/kernel_table.hpp"

namespace tp::backend::opencl {

const ops::kernels::KernelTable& opencl_kernel_table() noexcept;

}  // namespace tp::backend::opencl

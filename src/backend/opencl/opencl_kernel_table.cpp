// SPDX-License-Identifier: Apache-2.0
#include "backend/opencl/opencl_kernel_table.hpp"

#include "backend/opencl/opencl_kernels.hpp"

namespace tp::backend::opencl {

namespace {

constexpr ops::kernels::KernelTable kOpenClKernels{
    .binary = &kernels::binary,
    .scale = &kernels::scale,
    .add_scaled = &kernels::add_scaled,
    .sum_across_peers = &kernels::sum_across_peers,
    .broadcast_axis = &kernels::broadcast_axis,
    .scale_rows = &kernels::scale_rows,
    .cast = &kernels::cast,
    .all_finite = &kernels::all_finite,
    .fill = &kernels::fill,
    .random = &kernels::random,
    .matmul = &kernels::matmul,
    .correct_count = &kernels::correct_count,
    .bias_add = &kernels::bias_add,
    .bias_add_grad = &kernels::bias_add_grad,
    .relu = &kernels::relu,
    .relu_grad = &kernels::relu_grad,
    .softmax = &kernels::softmax,
    .cross_entropy = &kernels::cross_entropy,
    .sgd = &kernels::sgd,
    .adam = &kernels::adam,
    .sgd_multi = &kernels::sgd_multi,
    .adam_multi = &kernels::adam_multi,
    .reduce = &kernels::reduce,
    .argmax = &kernels::argmax,
};

}  // namespace

const ops::kernels::KernelTable& opencl_kernel_table() noexcept { return kOpenClKernels; }

}  // namespace tp::backend::opencl

// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/cpu_kernel_table.hpp"

#include "backend/cpu/ops/op_kernels.hpp"

namespace tp::backend::cpu {

namespace {

constexpr ops::kernels::KernelTable kCpuKernels{
    .binary = &op_kernels::binary,
    .scale = &op_kernels::scale,
    .add_scaled = &op_kernels::add_scaled,
    .sum_across_peers = &op_kernels::sum_across_peers,
    .broadcast_axis = &op_kernels::broadcast_axis,
    .scale_rows = &op_kernels::scale_rows,
    .cast = &op_kernels::cast,
    .all_finite = &op_kernels::all_finite,
    .fill = &op_kernels::fill,
    .random = &op_kernels::random,
    .matmul = &op_kernels::matmul,
    .correct_count = &op_kernels::correct_count,
    .bias_add = &op_kernels::bias_add,
    .bias_add_grad = &op_kernels::bias_add_grad,
    .relu = &op_kernels::relu,
    .relu_grad = &op_kernels::relu_grad,
    .softmax = &op_kernels::softmax,
    .cross_entropy = &op_kernels::cross_entropy,
    .sgd = &op_kernels::sgd,
    .adam = &op_kernels::adam,
    .adam_across_peers = &op_kernels::adam_across_peers,
    .sgd_multi = &op_kernels::sgd_multi,
    .adam_multi = &op_kernels::adam_multi,
    .reduce = &op_kernels::reduce,
    .argmax = &op_kernels::argmax,
};

}  // namespace

const ops::kernels::KernelTable& cpu_kernel_table() noexcept { return kCpuKernels; }

}  // namespace tp::backend::cpu

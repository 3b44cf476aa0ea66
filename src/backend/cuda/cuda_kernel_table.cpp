// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/cuda_kernel_table.hpp"

#include "backend/cuda/cuda_kernels.hpp"

namespace tp::backend::cuda {

namespace {

constexpr ops::kernels::KernelTable kCudaKernels{
    .binary = &adapters::binary,
    .scale = &adapters::scale,
    .add_scaled = &adapters::add_scaled,
    .sum_across_peers = &adapters::sum_across_peers,
    .broadcast_axis = &adapters::broadcast_axis,
    .scale_rows = &adapters::scale_rows,
    .cast = &adapters::cast,
    .all_finite = &adapters::all_finite,
    .fill = &adapters::fill,
    .random = &adapters::random,
    .matmul = &adapters::matmul,
    .correct_count = &adapters::correct_count,
    .bias_add = &adapters::bias_add,
    .bias_add_grad = &adapters::bias_add_grad,
    .relu = &adapters::relu,
    .relu_grad = &adapters::relu_grad,
    .softmax = &adapters::softmax,
    .cross_entropy = &adapters::cross_entropy,
    .sgd = &adapters::sgd,
    .adam = &adapters::adam,
    .adam_across_peers = &adapters::adam_across_peers,
    .sgd_multi = &adapters::sgd_multi,
    .adam_multi = &adapters::adam_multi,
    .reduce = &adapters::reduce,
    .argmax = &adapters::argmax,
};

}  // namespace

const ops::kernels::KernelTable& cuda_kernel_table() noexcept { return kCudaKernels; }

}  // namespace tp::backend::cuda

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The cuda backend's kernels, one adapter per entry of ops::kernels::KernelTable (cuda_kernel_table.cpp
// registers them). Each adapter enqueues a command on `stream` that takes the tensors' device addresses and
// calls a launch function of kernels/launch.cuh (or cuBLASLt) on the stream's CUDA stream; the arguments were
// validated by the op, so an adapter only dispatches on dtype.
//
// Families: cuda_kernels_elementwise.cpp (kernels/elementwise.cu, cast.cu), cuda_kernels_rows.cpp (rows.cu),
// cuda_kernels_optimizer.cpp (optimizer.cu, random.cu) and cuda_matmul.cpp (cuBLASLt).

#include "tensorpool/ops/kernel_table.hpp"

namespace tp::backend::cuda::adapters {

using namespace ops::kernels;  // NOLINT(google-build-using-namespace): the Args types of every adapter

void binary(device::Stream& stream, const BinaryArgs& args);
void scale(device::Stream& stream, const ScaleArgs& args);
void add_scaled(device::Stream& stream, const AddScaledArgs& args);
void sum_across_peers(device::Stream& stream, const SumAcrossPeersArgs& args);
void broadcast_axis(device::Stream& stream, const BroadcastAxisArgs& args);
void scale_rows(device::Stream& stream, const ScaleRowsArgs& args);
void cast(device::Stream& stream, const CastArgs& args);
void all_finite(device::Stream& stream, const AllFiniteArgs& args);
void fill(device::Stream& stream, const FillArgs& args);
void random(device::Stream& stream, const RandomArgs& args);
void matmul(device::Stream& stream, const MatmulArgs& args);
void correct_count(device::Stream& stream, const CorrectCountArgs& args);
void bias_add(device::Stream& stream, const BiasAddArgs& args);
void bias_add_grad(device::Stream& stream, const BiasAddGradArgs& args);
void relu(device::Stream& stream, const ReluArgs& args);
void relu_grad(device::Stream& stream, const ReluGradArgs& args);
void softmax(device::Stream& stream, const SoftmaxArgs& args);
void cross_entropy(device::Stream& stream, const CrossEntropyArgs& args);
void sgd(device::Stream& stream, const SgdArgs& args);
void adam(device::Stream& stream, const AdamArgs& args);
void adam_across_peers(device::Stream& stream, const AdamAcrossPeersArgs& args);
void sgd_multi(device::Stream& stream, const SgdMultiArgs& args);
void adam_multi(device::Stream& stream, const AdamMultiArgs& args);
void reduce(device::Stream& stream, const ReduceArgs& args);
void argmax(device::Stream& stream, const ArgMaxArgs& args);

}  // namespace tp::backend::cuda::adapters

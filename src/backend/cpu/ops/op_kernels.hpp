// SPDX-License-Identifier: Apache-2.0
#pragma once
// The entries of the CPU kernel table (cpu_kernel_table.hpp), one source file per op family in this folder.
// Each takes the arguments the op validated (ops/kernel_table.hpp states them) and enqueues its work on
// `stream`; the tensors are captured by value, so their buffers live until the task has run.

#include "tensorpool/ops/kernel_table.hpp"

namespace tp::backend::cpu::op_kernels {

// elementwise.cpp
void binary(device::Stream& stream, const ops::kernels::BinaryArgs& args);
void scale(device::Stream& stream, const ops::kernels::ScaleArgs& args);
void add_scaled(device::Stream& stream, const ops::kernels::AddScaledArgs& args);
// peer_sum.cpp
void sum_across_peers(device::Stream& stream, const ops::kernels::SumAcrossPeersArgs& args);
// broadcast.cpp
void broadcast_axis(device::Stream& stream, const ops::kernels::BroadcastAxisArgs& args);
void scale_rows(device::Stream& stream, const ops::kernels::ScaleRowsArgs& args);
// cast.cpp
void cast(device::Stream& stream, const ops::kernels::CastArgs& args);
// finite.cpp
void all_finite(device::Stream& stream, const ops::kernels::AllFiniteArgs& args);
// init.cpp
void fill(device::Stream& stream, const ops::kernels::FillArgs& args);
void random(device::Stream& stream, const ops::kernels::RandomArgs& args);
// linalg.cpp
void matmul(device::Stream& stream, const ops::kernels::MatmulArgs& args);
// metrics.cpp
void correct_count(device::Stream& stream, const ops::kernels::CorrectCountArgs& args);
// nn.cpp
void bias_add(device::Stream& stream, const ops::kernels::BiasAddArgs& args);
void bias_add_grad(device::Stream& stream, const ops::kernels::BiasAddGradArgs& args);
void relu(device::Stream& stream, const ops::kernels::ReluArgs& args);
void relu_grad(device::Stream& stream, const ops::kernels::ReluGradArgs& args);
void softmax(device::Stream& stream, const ops::kernels::SoftmaxArgs& args);
void cross_entropy(device::Stream& stream, const ops::kernels::CrossEntropyArgs& args);
// optimizer.cpp
void sgd(device::Stream& stream, const ops::kernels::SgdArgs& args);
void adam(device::Stream& stream, const ops::kernels::AdamArgs& args);
void adam_across_peers(device::Stream& stream, const ops::kernels::AdamAcrossPeersArgs& args);
void sgd_multi(device::Stream& stream, const ops::kernels::SgdMultiArgs& args);
void adam_multi(device::Stream& stream, const ops::kernels::AdamMultiArgs& args);
// reduce.cpp
void reduce(device::Stream& stream, const ops::kernels::ReduceArgs& args);
void argmax(device::Stream& stream, const ops::kernels::ArgMaxArgs& args);

}  // namespace tp::backend::cpu::op_kernels

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The OpenCL backend's kernels, one launcher per entry of ops::kernels::KernelTable (opencl_kernel_table.cpp
// registers them). Each launcher enqueues on `stream` (a stream of an opencl device) a launch that sets the
// arguments of a kernel from kernels/<program>.cl and enqueues it: the arguments were validated by the op, so
// a launcher only dispatches on dtype. Float64 kernels throw tp::DeviceError naming the op, as the stream's
// error, on a device without cl_khr_fp64.
//
// Families: opencl_kernels_elementwise.cpp (kernels/elementwise.cl), opencl_kernels_rows.cpp (rows.cl),
// opencl_kernels_random.cpp (random.cl), opencl_kernels_optimizer.cpp (optimizer.cl) and
// opencl_kernels_matmul.cpp (CLBlast's GEMM).

#include "tensorpool/ops/kernel_table.hpp"

namespace tp::backend::opencl::kernels {

using ops::kernels::AdamArgs;
using ops::kernels::AdamMultiArgs;
using ops::kernels::AddScaledArgs;
using ops::kernels::AllFiniteArgs;
using ops::kernels::ArgMaxArgs;
using ops::kernels::AxisExtent;
using ops::kernels::BiasAddArgs;
using ops::kernels::BiasAddGradArgs;
using ops::kernels::BinaryArgs;
using ops::kernels::BinaryBroadcast;
using ops::kernels::BroadcastAxisArgs;
using ops::kernels::CastArgs;
using ops::kernels::CorrectCountArgs;
using ops::kernels::CrossEntropyArgs;
using ops::kernels::Distribution;
using ops::kernels::FillArgs;
using ops::kernels::MatmulArgs;
using ops::kernels::RandomArgs;
using ops::kernels::ReduceArgs;
using ops::kernels::ReluArgs;
using ops::kernels::ReluGradArgs;
using ops::kernels::ScaleArgs;
using ops::kernels::ScaleRowsArgs;
using ops::kernels::SgdArgs;
using ops::kernels::SgdMultiArgs;
using ops::kernels::SoftmaxArgs;
using ops::kernels::SumAcrossPeersArgs;

void binary(device::Stream& stream, const BinaryArgs& args);
void scale(device::Stream& stream, const ScaleArgs& args);
void add_scaled(device::Stream& stream, const AddScaledArgs& args);
void sum_across_peers(device::Stream& stream, const SumAcrossPeersArgs& args);
void broadcast_axis(device::Stream& stream, const BroadcastAxisArgs& args);
void scale_rows(device::Stream& stream, const ScaleRowsArgs& args);
void cast(device::Stream& stream, const CastArgs& args);
void all_finite(device::Stream& stream, const AllFiniteArgs& args);
void fill(device::Stream& stream, const FillArgs& args);
void relu(device::Stream& stream, const ReluArgs& args);
void relu_grad(device::Stream& stream, const ReluGradArgs& args);
void bias_add(device::Stream& stream, const BiasAddArgs& args);
void bias_add_grad(device::Stream& stream, const BiasAddGradArgs& args);

void softmax(device::Stream& stream, const SoftmaxArgs& args);
void cross_entropy(device::Stream& stream, const CrossEntropyArgs& args);
void correct_count(device::Stream& stream, const CorrectCountArgs& args);
void reduce(device::Stream& stream, const ReduceArgs& args);
void argmax(device::Stream& stream, const ArgMaxArgs& args);

void random(device::Stream& stream, const RandomArgs& args);

void sgd(device::Stream& stream, const SgdArgs& args);
void adam(device::Stream& stream, const AdamArgs& args);
void sgd_multi(device::Stream& stream, const SgdMultiArgs& args);
void adam_multi(device::Stream& stream, const AdamMultiArgs& args);

void matmul(device::Stream& stream, const MatmulArgs& args);

}  // namespace tp::backend::opencl::kernels

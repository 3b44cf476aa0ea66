// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/ops/linalg.hpp"

#include "ops/op_support.hpp"

namespace tp::ops {

namespace {

constexpr std::string_view kOp = "MatMul";

struct MatmulDims {
  std::int64_t m, n, k;
};

MatmulDims check_matmul(const Tensor& a, const Tensor& b, MatmulOptions options) {
  detail::require_rank(kOp, {"a", a}, 2);
  detail::require_rank(kOp, {"b", b}, 2);
  detail::require_floating_or_half(kOp, {"a", a});
  detail::require_same_dtype(kOp, {"a", a}, {"b", b});
  const std::int64_t m = a.shape().dim(options.transpose_a ? 1 : 0);
  const std::int64_t k = a.shape().dim(options.transpose_a ? 0 : 1);
  const std::int64_t k_of_b = b.shape().dim(options.transpose_b ? 1 : 0);
  const std::int64_t n = b.shape().dim(options.transpose_b ? 0 : 1);
  if (k != k_of_b) {
    TP_THROW(InvalidArgument, "ops", kOp, ": a ", a.shape(), options.transpose_a ? " (transposed)" : "", " and b ",
             b.shape(), options.transpose_b ? " (transposed)" : "", " do not chain: inner dimensions ", k, " and ",
             k_of_b, " differ");
  }
  return {m, n, k};
}

}  // namespace

void matmul_into(const Tensor& a, const Tensor& b, const Tensor& out, MatmulOptions options, const OpContext& context) {
  device::Device& device = detail::common_device(kOp, {{"a", a}, {"b", b}, {"out", out}});
  const MatmulDims dims = check_matmul(a, b, options);
  detail::require_same_dtype(kOp, {"a", a}, {"out", out});
  detail::require_shape(kOp, {"out", out}, Shape{dims.m, dims.n});
  device::Stream& stream = detail::stream_for(kOp, device, context);
  detail::kernel(device, &kernels::KernelTable::matmul, kOp)(stream,
                                                             kernels::MatmulArgs{.a = a,
                                                                                 .b = b,
                                                                                 .out = out,
                                                                                 .transpose_a = options.transpose_a,
                                                                                 .transpose_b = options.transpose_b,
                                                                                 .m = dims.m,
                                                                                 .n = dims.n,
                                                                                 .k = dims.k});
}

Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions options, const OpContext& context) {
  device::Device& device = detail::common_device(kOp, {{"a", a}, {"b", b}});
  const MatmulDims dims = check_matmul(a, b, options);
  Tensor out = detail::allocate_output(kOp, Shape{dims.m, dims.n}, a.dtype(), device, context);
  matmul_into(a, b, out, options, context);
  return out;
}

}  // namespace tp::ops

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The CUDA kernels' launch functions (kernels/*.cu), in plain C++: raw device pointers, element counts and a
// cudaStream_t, no tensorpool type. Both nvcc (the .cu files) and the host compiler (the adapters in
// cuda_kernels_*.cpp) read this header. Every launch enqueues its kernels on `stream` without waiting and
// returns cudaGetLastError() after the launch (cudaSuccess when there was nothing to do), which the adapters
// turn into tp::DeviceError. Arguments were validated by the op: the kernels trust them.
//
// Semantics are the CPU kernels' (src/backend/cpu/kernels/), named beside each function. float16 and bfloat16
// are storage types: widened exactly to float, computed in float, rounded once (to nearest even) when stored.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tp::backend::cuda::kernels {

// The dtypes the kernels know, in the adapters' terms (the adapters map tp::DType onto these).
enum class Dtype : int { f32, f64, f16, bf16, i32, i64, u8, boolean };

// ---- element-wise (elementwise.cu) ----

// op: 0 add, 1 sub, 2 mul, 3 div; broadcast: 0 same shape, 1 y is a row of `cols`, 2 y is a scalar (f32, f64).
cudaError_t launch_binary(Dtype dtype, int op, int broadcast, const void* x, const void* y, void* out, std::int64_t n,
                          std::int64_t cols, cudaStream_t stream);
// out = x * alpha (alpha already rounded to the dtype by the caller: passed in double, exact for f32).
cudaError_t launch_scale(Dtype dtype, const void* x, double alpha, void* out, std::int64_t n, cudaStream_t stream);
// y += alpha * x (f32, f64; f16/bf16 in float, one rounding).
cudaError_t launch_add_scaled(Dtype dtype, void* y, double alpha, const void* x, std::int64_t n, cudaStream_t stream);
// out = in[0] + in[1] + ... + in[count - 1], left to right, each addition rounded to the dtype; out may be one
// of the inputs (each element reads every input before it writes). count 1..kPeerSumInputs.
inline constexpr int kPeerSumInputs = 8;
struct PeerSumInputs {
  const void* inputs[kPeerSumInputs];
};
cudaError_t launch_peer_sum(Dtype dtype, void* out, const PeerSumInputs& inputs, int count, std::int64_t n,
                            cudaStream_t stream);
// out[o, a, i] = alpha * x[o, i] (alpha == 1: a copy), n = outer * axis * inner (f32, f64).
cudaError_t launch_broadcast_axis(Dtype dtype, const void* x, void* out, std::int64_t axis, std::int64_t inner,
                                  double alpha, std::int64_t n, cudaStream_t stream);
// out[r, c] = x[r, c] * s[r] (f32, f64).
cudaError_t launch_scale_rows(Dtype dtype, const void* x, const void* s, void* out, std::int64_t cols, std::int64_t n,
                              cudaStream_t stream);
// y = x <= 0 ? 0 : x (NaN passes) and dx = x > 0 ? dy : 0 (f32, f64, f16, bf16).
cudaError_t launch_relu(Dtype dtype, const void* x, void* out, std::int64_t n, cudaStream_t stream);
cudaError_t launch_relu_grad(Dtype dtype, const void* dy, const void* x, void* dx, std::int64_t n, cudaStream_t stream);
// out[r, c] = x[r, c] + bias[c]; dbias[c] = sum over rows of dy[r, c] in double, in row order, rounded once.
cudaError_t launch_bias_add(Dtype dtype, const void* x, const void* bias, void* out, std::int64_t cols, std::int64_t n,
                            cudaStream_t stream);
cudaError_t launch_bias_add_grad(Dtype dtype, const void* dy, void* dbias, std::int64_t rows, std::int64_t cols,
                                 cudaStream_t stream);
// out (float32 scalar) = 1 when every element of x (f32, f64, f16, bf16) is finite, else 0: out set to 1, then
// any thread that finds a non-finite element stores 0 (the same value whichever thread it is).
cudaError_t launch_all_finite(Dtype dtype, const void* x, float* out, std::int64_t n, cudaStream_t stream);
// out = value, rounded to the dtype (f32, f64).
cudaError_t launch_fill(Dtype dtype, void* out, double value, std::int64_t n, cudaStream_t stream);

// ---- casts (cast.cu): any pair of the eight dtypes, backend/cpu/kernels/cast.hpp's rules ----
cudaError_t launch_cast(Dtype from, Dtype to, const void* x, void* out, std::int64_t n, cudaStream_t stream);

// ---- random (random.cu): Philox4x32-10 as backend/cpu/kernels/random.hpp (f32, f64) ----
// distribution 0 uniform in [a, b), 1 normal (mean a, stddev b). offset + n must not overflow (checked by the
// caller).
cudaError_t launch_random(Dtype dtype, int distribution, void* out, double a, double b, std::uint64_t seed,
                          std::uint64_t offset, std::int64_t n, cudaStream_t stream);

// ---- rows (rows.cu): softmax, cross-entropy, correct count, reductions (f32, f64) ----

// Labels' first row outside [0, cols) and that label: status[0] = the row (or -1 when every label is valid),
// status[1] = its label. One block scans every row; no atomics. labels_64: int64 labels, else int32.
cudaError_t launch_check_labels(const void* labels, bool labels_64, std::int64_t rows, std::int64_t cols,
                                std::int64_t* status, cudaStream_t stream);
// One thread per row; out may alias x.
cudaError_t launch_softmax(Dtype dtype, const void* x, void* out, std::int64_t rows, std::int64_t cols, bool log,
                           cudaStream_t stream);
// from_logits: loss = log(s) - (x[label] - max), gradient = softmax - onehot; else Keras's from-probabilities
// form (clip to [1e-7, 1 - 1e-7]). gradient may be null. A row with a label out of range gets NaN (and is
// reported by launch_check_labels, run first).
cudaError_t launch_cross_entropy(Dtype dtype, bool from_logits, const void* x, const void* labels, bool labels_64,
                                 void* loss, void* gradient, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// out[0] (float32) = rows whose first maximum (the first NaN if any) equals the label. One block.
cudaError_t launch_correct_count(Dtype dtype, const void* x, const void* labels, bool labels_64, float* out,
                                 std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// reduction: 0 sum, 1 mean, 2 max over the middle axis of [outer, axis, inner]; one thread per output, in
// order, summing in double. n = outer * inner.
cudaError_t launch_reduce(Dtype dtype, int reduction, const void* x, void* out, std::int64_t axis, std::int64_t inner,
                          std::int64_t n, cudaStream_t stream);
// out (int64) = index of the first maximum (or the first NaN) over the middle axis; axis >= 1.
cudaError_t launch_argmax(Dtype dtype, const void* x, std::int64_t* out, std::int64_t axis, std::int64_t inner,
                          std::int64_t n, cudaStream_t stream);

// ---- matmul_fallback.cu ----
// out[m, n] = op(a)[m, k] op(b)[k, n], row-major (a stored [k, m] with transpose_a, b [n, k] with transpose_b):
// one thread per output, in order, float accumulation (double for f64). For products cuBLASLt cannot take.
cudaError_t launch_matmul_fallback(Dtype dtype, bool transpose_a, bool transpose_b, const void* a, const void* b,
                                   void* out, std::int64_t m, std::int64_t n, std::int64_t k, cudaStream_t stream);

// ---- optimizers (optimizer.cu) ----
// param: f32 or f64; grad: param's dtype, or f16/bf16 for a f32 param. apply: a float32 scalar on the device
// or null (always apply); 0 leaves everything untouched, any other value multiplies the gradient.
// Hyperparameters are rounded to the parameter dtype by the kernels (passed in double, computed on the host as
// the CPU does).
struct SgdHyper {
  double lr, momentum;
  bool nesterov;
};
cudaError_t launch_sgd(Dtype param_dtype, Dtype grad_dtype, const float* apply, void* param, const void* grad,
                       void* velocity, const SgdHyper& hyper, std::int64_t n, cudaStream_t stream);
struct AdamHyper {
  double alpha, one_minus_beta1, one_minus_beta2, epsilon;
};
cudaError_t launch_adam(Dtype param_dtype, Dtype grad_dtype, const float* apply, void* param, const void* grad, void* m,
                        void* v, const AdamHyper& hyper, std::int64_t n, cudaStream_t stream);
// Adam on the gradient grads[0] + ... + grads[count - 1] (each addition rounded to the dtype, as add_scaled),
// read in place (peers' memory through unified addressing), then param, m, v copied into each mirror (a mirror
// with m == v == null takes the parameter only). f32 or f64; count 1..kPeerSumInputs per launch.
inline constexpr int kAdamMirrors = 8;
struct AdamMirrorPointers {
  void* param[kAdamMirrors];
  void* m[kAdamMirrors];
  void* v[kAdamMirrors];
};
cudaError_t launch_adam_summed(Dtype dtype, void* param, const PeerSumInputs& grads, int count, void* m, void* v,
                               const AdamMirrorPointers& mirrors, int mirror_count, const AdamHyper& hyper,
                               std::int64_t n, cudaStream_t stream);

// ---- multi-tensor optimizers (optimizer.cu) ----
// launch_sgd / launch_adam (no apply flag, grad of param's dtype: f32 or f64) on entries 0..count - 1 of a table
// passed by value in the kernel's parameter memory (no device allocation, nothing to copy first, so the launch
// can be captured into a CUDA graph): one launch, blockIdx.y picks the entry and a grid-stride loop over x
// covers its n elements. Each element is computed by the single kernels' expressions, so the bits are theirs.
// count 1..kMultiTensorEntries per launch (the adapters split longer lists); velocity null: no momentum.
inline constexpr int kMultiTensorEntries = 32;
struct SgdMultiTable {
  void* param[kMultiTensorEntries];
  const void* grad[kMultiTensorEntries];
  void* velocity[kMultiTensorEntries];
  std::int64_t n[kMultiTensorEntries];
};
cudaError_t launch_sgd_multi(Dtype dtype, const SgdMultiTable& table, int count, const SgdHyper& hyper,
                             cudaStream_t stream);
struct AdamMultiTable {
  void* param[kMultiTensorEntries];
  const void* grad[kMultiTensorEntries];
  void* m[kMultiTensorEntries];
  void* v[kMultiTensorEntries];
  std::int64_t n[kMultiTensorEntries];
};
cudaError_t launch_adam_multi(Dtype dtype, const AdamMultiTable& table, int count, const AdamHyper& hyper,
                              cudaStream_t stream);

}  // namespace tp::backend::cuda::kernels

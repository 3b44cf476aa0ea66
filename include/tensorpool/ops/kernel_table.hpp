// SPDX-License-Identifier: Apache-2.0
#pragma once
// The seam between the ops and the backends. An op validates its arguments on the calling thread (naming
// the op), then calls the kernel that its device's backend registered here. A kernel puts its work on
// `stream` (of the tensors' device) and returns: the arguments are valid for every entry (shapes, dtypes,
// devices checked by the op), so a kernel only dispatches on dtype and enqueues.
//
// One KernelTable per backend, registered per DeviceKind (cpu and sim register the same CPU table). Entries
// are plain function pointers, looked up once per op call by an array index: no string, no map. A null entry
// means the backend has no such kernel; the op then throws tp::DeviceError naming the op and the device.
//
// Tensors in the argument structs are handles (they keep their buffers alive while a task captures them).
// A kernel reaches their memory in its backend's way: host pointers inside a task for cpu and sim, buffer
// handles and offsets on a queue for opencl.

#include <cstdint>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/device_id.hpp"
#include "tensorpool/device/stream.hpp"
#include "tensorpool/ops/broadcast.hpp"
#include "tensorpool/ops/elementwise.hpp"
#include "tensorpool/ops/linalg.hpp"
#include "tensorpool/ops/nn.hpp"
#include "tensorpool/ops/optimizer.hpp"
#include "tensorpool/ops/reduce.hpp"

namespace tp::ops::kernels {

// A shape viewed as [outer, axis, inner] around one axis.
struct AxisExtent {
  std::int64_t outer = 1, axis = 1, inner = 1;
};

// x, y, out of one float dtype (f32, f64); y is x's shape, x's last dimension (row), or a scalar [].
enum class BinaryBroadcast { same, row, scalar };
struct BinaryArgs {
  Arithmetic op;
  BinaryBroadcast broadcast;
  Tensor x, y, out;
};
// out = alpha * x (f32, f64).
struct ScaleArgs {
  Tensor x;
  double alpha;
  Tensor out;
};
// y += alpha * x, in place (f32, f64; f16/bf16 summed in float32 and rounded once). x may live on a peer of
// y's device (device::peer_accessible): the kernel reads it in place.
struct AddScaledArgs {
  Tensor y;
  double alpha;
  Tensor x;
};
// Every output = inputs[0] + inputs[1] + ... in order, each addition rounded as AddScaled's; outputs and
// inputs live on `stream`'s device or on its peers (see ops/peer_sum.hpp).
struct SumAcrossPeersArgs {
  std::vector<Tensor> outputs, inputs;
};
// out[o, a, i] = x[o, i] (copy) or x[o, i] / axis (mean), x viewed [outer, inner] (f32, f64).
struct BroadcastAxisArgs {
  Tensor x;
  AxisExtent extent;
  BroadcastMode mode;
  Tensor out;
};
// out[r, c] = x[r, c] * s[r] (f32, f64; x rank 2).
struct ScaleRowsArgs {
  Tensor x, s, out;
};
// out = x converted to out's dtype (any pair among f32, f64, f16, bf16, i32, i64, u8, bool), rounding to
// nearest even, as backend/cpu/kernels/cast.hpp defines.
struct CastArgs {
  Tensor x, out;
};
// out (a float32 scalar) = 1 when every element of x (f32, f64, f16, bf16) is finite, else 0.
struct AllFiniteArgs {
  Tensor x, out;
};
// out = value everywhere (f32, f64).
struct FillArgs {
  Tensor out;
  double value;
};
// Philox-4x32-10 streams keyed by (seed, offset + element index), as backend/cpu/kernels/random.hpp defines;
// the same seed gives the same values on every backend, to the float tolerance.
enum class Distribution { uniform, normal, glorot_uniform };
struct RandomArgs {
  Tensor out;
  Distribution distribution;
  double a, b;  // uniform: low, high; normal: mean, stddev; glorot_uniform: unused
  std::uint64_t seed, offset;
};
// out[m, n] = op(a)[m, k] op(b)[k, n] (f32, f64; f16/bf16 accumulated in float32).
struct MatmulArgs {
  Tensor a, b, out;
  bool transpose_a, transpose_b;
  std::int64_t m, n, k;
};
// out (a float32 scalar) = how many rows of predictions [rows, classes] (f32, f64) have their argmax equal
// to labels (i32 or i64).
struct CorrectCountArgs {
  Tensor predictions, labels, out;
};
// out = x + bias over rows (x rank 2, bias [cols]; f32, f64, f16, bf16).
struct BiasAddArgs {
  Tensor x, bias, out;
};
// dbias[c] = sum over rows of dy[r, c].
struct BiasAddGradArgs {
  Tensor dy, dbias;
};
// out = max(x, 0) (f32, f64, f16, bf16).
struct ReluArgs {
  Tensor x, out;
};
// dx = dy where x > 0, else 0.
struct ReluGradArgs {
  Tensor dy, x, dx;
};
// Row-wise (log-)softmax of x [rows, cols] (f32, f64).
struct SoftmaxArgs {
  Tensor x, out;
  bool log;
};
// Per row: loss[r] and gradient[r, :] of sparse cross-entropy from logits or probabilities (f32, f64; labels
// i32 or i64).
struct CrossEntropyArgs {
  CrossEntropyInput kind;
  Tensor input, labels, loss, gradient;
};
// apply: undefined (always apply) or a float32 scalar on the device read when the kernel runs: 0 skips the
// update, any other value multiplies the gradient. grad has param's dtype, or f16/bf16 for a f32 param.
struct SgdArgs {
  Tensor apply, param, grad, velocity;  // velocity undefined when momentum is 0
  SgdOptions options;
};
struct AdamArgs {
  Tensor apply, param, grad, m, v;
  std::int64_t step;
  AdamOptions options;
};
// Adam with the gradient grads[0] + grads[1] + ... (in order, each addition rounded as AddScaled's), read in
// place: param, m, v on the stream's device, each of grads there or on a peer (device::peer_accessible).
// param, m, v and every grad share one float dtype (f32, f64) and shape. The updated param, m and v are also
// stored into each of `mirrors` (on peers, the same dtype and shape, overlapping nothing else). With a copy
// (float32 param, 16-bit grads of the copy's dtype), the updated param rounded to it is stored there and into
// every mirror's copy.
struct AdamAcrossPeersArgs {
  Tensor param;
  std::vector<Tensor> grads;
  Tensor m, v;
  std::int64_t step;
  AdamOptions options;
  std::vector<AdamState> mirrors;
  Tensor copy{};
};
// The multi-tensor updates (ops::sgd_update_multi / adam_update_multi): entry k updates params[k] with
// grads[k] and its slots exactly as SgdArgs / AdamArgs without a flag would; lists of one length >= 1, one
// float dtype (f32, f64) and one device; velocities empty when momentum is 0. One launch for the whole list.
struct SgdMultiArgs {
  std::vector<Tensor> params, grads, velocities;
  SgdOptions options;
};
struct AdamMultiArgs {
  std::vector<Tensor> params, grads, m, v;
  std::int64_t step;
  AdamOptions options;
};
// out = reduction of x over the middle axis of `extent` (f32, f64).
struct ReduceArgs {
  Tensor x;
  AxisExtent extent;
  Reduction reduction;
  Tensor out;
};
// out (i64) = index of the first maximum over the middle axis.
struct ArgMaxArgs {
  Tensor x;
  AxisExtent extent;
  Tensor out;
};

template <typename Args>
using Kernel = void (*)(device::Stream& stream, const Args& args);

struct KernelTable {
  Kernel<BinaryArgs> binary = nullptr;
  Kernel<ScaleArgs> scale = nullptr;
  Kernel<AddScaledArgs> add_scaled = nullptr;
  Kernel<SumAcrossPeersArgs> sum_across_peers = nullptr;
  Kernel<BroadcastAxisArgs> broadcast_axis = nullptr;
  Kernel<ScaleRowsArgs> scale_rows = nullptr;
  Kernel<CastArgs> cast = nullptr;
  Kernel<AllFiniteArgs> all_finite = nullptr;
  Kernel<FillArgs> fill = nullptr;
  Kernel<RandomArgs> random = nullptr;
  Kernel<MatmulArgs> matmul = nullptr;
  Kernel<CorrectCountArgs> correct_count = nullptr;
  Kernel<BiasAddArgs> bias_add = nullptr;
  Kernel<BiasAddGradArgs> bias_add_grad = nullptr;
  Kernel<ReluArgs> relu = nullptr;
  Kernel<ReluGradArgs> relu_grad = nullptr;
  Kernel<SoftmaxArgs> softmax = nullptr;
  Kernel<CrossEntropyArgs> cross_entropy = nullptr;
  Kernel<SgdArgs> sgd = nullptr;
  Kernel<AdamArgs> adam = nullptr;
  Kernel<AdamAcrossPeersArgs> adam_across_peers = nullptr;
  Kernel<SgdMultiArgs> sgd_multi = nullptr;
  Kernel<AdamMultiArgs> adam_multi = nullptr;
  Kernel<ReduceArgs> reduce = nullptr;
  Kernel<ArgMaxArgs> argmax = nullptr;
};

// Registers `table` (static storage: it must outlive every op) as the kernels of devices of `kind`. Backends
// call it from their device factory; registering the same table again is a no-op, another one replaces it.
void register_kernels(device::DeviceKind kind, const KernelTable& table) noexcept;
// The table registered for `kind`, or null.
[[nodiscard]] const KernelTable* kernels_for(device::DeviceKind kind) noexcept;

}  // namespace tp::ops::kernels

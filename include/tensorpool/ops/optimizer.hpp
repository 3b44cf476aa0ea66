// SPDX-License-Identifier: Apache-2.0
#pragma once
// In-place optimizer updates with Keras semantics and defaults (see backend/cpu/kernels/optimizer.hpp for the
// formulas). All tensors share one shape, dtype (f32 or f64) and device, except that a float32 parameter may
// take a float16 or bfloat16 gradient (mixed precision: widened to float32 as it is read).

#include <cstdint>
#include <span>

#include "tensorpool/ops/op_context.hpp"

namespace tp::ops {

struct SgdOptions {
  double learning_rate = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
};
// `velocity` may be undefined when momentum == 0.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity, const SgdOptions& options,
                const OpContext& context = {});

struct AdamOptions {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-7;
};
// `step` counts from 1 (the bias corrections use it).
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, std::int64_t step,
                 const AdamOptions& options, const OpContext& context = {});

// Adam on the gradient grads[0] + grads[1] + ... + grads[k-1], summed left to right as SumAcrossPeers sums
// (ops/peer_sum.hpp), without storing the sum: a mirrored replica's update reading every replica's gradient
// in place, so that every replica applies bitwise the same update. param, m and v share a device; each grad is
// on it or on a device it reaches directly (device::peer_accessible); all share param's shape and its dtype
// (f32 or f64), except that a float32 param may take float16 or bfloat16 grads (all of one dtype; each
// addition then rounded once to it, as SumAcrossPeers on them, and the sum widened as AdamUpdate widens a
// 16-bit gradient). Ordering with the peers' streams is the caller's (the gradients must be complete, and a peer
// must not overwrite its gradient before this kernel has run). Throws tp::InvalidArgument on no gradients, a
// dtype or shape mismatch or a gradient out of reach, and tp::DeviceError where the backend has no such kernel.
void adam_update_across_peers(const Tensor& param, std::span<const Tensor> grads, const Tensor& m, const Tensor& v,
                              std::int64_t step, const AdamOptions& options, const OpContext& context = {});

// A parameter with its Adam slots, of one shape, dtype and device, and optionally its compute copy: a float16 /
// bfloat16 tensor of its shape on its device (mixed precision's layers read it in place of a Cast of the
// variable), which the update keeps equal to the cast of the updated parameter.
struct AdamState {
  Tensor param, m, v;
  Tensor copy{};
};

// adam_update_across_peers on `state`, whose updated param, m and v are then also stored into every one of
// `mirrors` (each on a device state's device reaches directly, of state's shape and dtype), block by block while
// they are in cache: replicas that split a parameter's elements between them update each range once and all
// end bitwise equal. A mirror with m and v undefined receives the parameter only (sharded slots, which only
// their owner keeps). A mirror's tensors must not overlap state's, a gradient or another mirror's. Throws as
// adam_update_across_peers, and tp::InvalidArgument on a mirror of another shape or dtype, out of reach,
// without a param, or with only one of m and v. With state.copy (a float32 param with 16-bit gradients only, the
// copy of the gradients' dtype), the updated parameter rounded to the copy's dtype is stored into state.copy and
// every mirror's copy, which each mirror then must have (tp::InvalidArgument otherwise).
void adam_update_across_peers(const AdamState& state, std::span<const Tensor> grads, std::span<const AdamState> mirrors,
                              std::int64_t step, const AdamOptions& options, const OpContext& context = {});

// Multi-tensor forms: the update of every entry k (params[k] with grads[k] and its slots[k]) in one kernel
// launch per step instead of one per variable, each element computed by the same expressions as the single
// update, so the results are bitwise those of calling sgd_update / adam_update on each entry. Lists are
// parallel: one grad and one slot of each kind per param, at least one param. Every tensor lives on one device
// and has one float dtype (f32 or f64; no 16-bit gradients); an entry's grad and slots have its param's shape
// (entries' shapes may differ). What an entry writes (its param and slots) overlaps no other tensor of the call;
// entries may be ranges of one buffer (a bucket of gradients, a shard of slots). `velocities` may be empty when
// options.momentum == 0. Throws tp::InvalidArgument naming the list and the entry on a length, dtype, device or
// shape mismatch, and tp::DeviceError where the backend has no multi-tensor kernel (KernelTable::sgd_multi /
// adam_multi).
void sgd_update_multi(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> velocities,
                      const SgdOptions& options, const OpContext& context = {});
void adam_update_multi(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                       std::span<const Tensor> v, std::int64_t step, const AdamOptions& options,
                       const OpContext& context = {});

// Conditional forms for dynamic loss scaling: `apply` is a float32 scalar [] on the parameter's device, read
// when the stream reaches the update (a graph computes it earlier in the same step from AllFinite). 0 skips
// the step: the parameter and every slot are left bitwise untouched. Any other value runs the update on
// gradient x apply: 1 uses the gradient as is, 1 / loss scale unscales a gradient that is still scaled.
void sgd_update_if(const Tensor& apply, const Tensor& param, const Tensor& grad, const Tensor& velocity,
                   const SgdOptions& options, const OpContext& context = {});
void adam_update_if(const Tensor& apply, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    std::int64_t step, const AdamOptions& options, const OpContext& context = {});

}  // namespace tp::ops

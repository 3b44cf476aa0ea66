// SPDX-License-Identifier: Apache-2.0
#pragma once
// The optimizer updates of a training step as the update stages ask for them, one per parameter (or per
// parameter shard) and replica, and how they become graph nodes: with grouping on, the plain ApplyAdam (or
// ApplySgd) updates of one device that share their hyperparameters and dtype become one ApplyAdamMulti
// (ApplySgdMulti) node, so a step launches one update kernel per device instead of one per variable. The
// multi-tensor kernels compute every element as the single ones do: grouping changes no bit of training, no
// variable name (checkpoints restore either way) and no buffer (the node updates the same variables in place
// and reads the same gradients, so the memory plan attributes the same bytes).
//
// Left as they are: the conditional forms (ApplyAdamIf, ApplySgdIf: loss scaling's apply flag), updates whose
// gradient is 16-bit (mixed precision's float32 master weights), and a group of one.

#include <string>
#include <vector>

#include "tensorpool/graph/graph.hpp"

namespace tp::train {

struct UpdateRequest {
  std::string op{};                     // ApplyAdam, ApplySgd, ApplyAdamIf or ApplySgdIf
  std::vector<graph::Output> inputs{};  // var, grad, slots (m, v or velocity), then apply for the If forms
  graph::Attributes attributes{};       // hyperparameters and, for a range, `slice`
  std::string name{};                   // the node's name when it stays a single update
  std::string device{};                 // the requested device ("sim:0")
  std::string prefix{};                 // the replica's prefix ("replica_1/" or ""): a group's node is named
                                        // <prefix>ApplyAdamMulti (or ApplySgdMulti)
};

// Adds the update nodes of `requests` to `g`, grouped when `group` is true, and returns their names (what a
// step runs as targets) in the order the nodes were added.
std::vector<std::string> add_updates(graph::Graph& g, const std::vector<UpdateRequest>& requests, bool group);

// Whether every device named in `devices` can run the multi-tensor updates: its backend registered a kernel
// table with both entries (KernelTable::sgd_multi and adam_multi), or none yet (nothing runs there, as when a
// plan is estimated without the device).
[[nodiscard]] bool multi_tensor_updates_supported(const std::vector<std::string>& devices);

}  // namespace tp::train

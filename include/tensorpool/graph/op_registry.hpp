// SPDX-License-Identifier: Apache-2.0
#pragma once
// The op registry: for each op, its arity, type inference, kernels per backend and gradient function. Ops
// register once at start-up (built-in ones in src/graph/ops/; a higher layer adds its own, as
// tensorpool/graph/op_definition.hpp says); lookups are thread-safe after that.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/device_id.hpp"
#include "tensorpool/device/stream.hpp"
#include "tensorpool/graph/graph.hpp"

namespace tp::graph {

// What type inference sees: the node (name, attributes) and its inputs' types. Feeds have fixed the
// placeholders' dims when a Session specialises the graph; at build time some dims may be -1.
struct InferenceContext {
  const Node& node;
  std::vector<TensorType> inputs;
};

// What a kernel sees: its inputs and its outputs, already allocated on one device (the executor planned
// them), the node's attributes, the stream to enqueue on and the training step of this run.
struct KernelContext {
  const Node& node;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  device::Stream& stream;
  std::int64_t step = 0;
};

// What a gradient function sees and builds: the forward node, the gradient of each of its outputs (nullopt
// when no gradient flows into that output), and the graph to add gradient nodes to. It returns one entry per
// forward input: the gradient's Output, or nullopt when the input gets none (labels, integer inputs).
struct GradientContext {
  Graph& graph;
  const Node& node;  // copied before the call: adding nodes may move the graph's storage
  std::vector<std::optional<Output>> output_gradients;
  // Which inputs lie on a path from the requested xs (empty: all). A gradient function may skip building the
  // gradient of an unwanted input (returning nullopt for it); autodiff ignores what it returns for one.
  std::vector<bool> wanted_inputs{};

  bool wants(int input) const { return wanted_inputs.empty() || wanted_inputs[static_cast<std::size_t>(input)]; }
  const TensorType& input_type(int input) const { return graph.type_of(node.inputs[static_cast<std::size_t>(input)]); }
  // Adds a gradient node named "gradients/<node.name>/<op>" (made unique), placed like the forward node (same
  // `device` and `colocation_group`: gradients are colocated with their forward ops). Returns its output 0.
  Output add(std::string_view op, std::vector<Output> inputs, Attributes attributes = {});
};

// Aggregate: register with designated initialisers (every member has a default, so any may be left out).
struct OpDef {
  std::string name{};
  int num_inputs = 0;
  int num_outputs = 1;
  // Throws tp::InvalidArgument naming the node and the mismatch.
  std::function<std::vector<TensorType>(const InferenceContext&)> infer{};
  // Kernels per backend kind; a node placed on a kind without one is soft-placed on cpu:0 (or fails with
  // soft placement off).
  std::map<device::DeviceKind, std::function<void(KernelContext&)>> kernels{};
  // Optional: makes the kernel of one node for one backend kind (a kind in `kernels`), for an op whose
  // kernel resolves something the node's attributes fix (a collective's communicator). The executor calls it
  // once, when a step is prepared, and runs what it returns on every run; without it, the executor keeps
  // kernels.at(kind). Either way the result computes what kernels.at(kind) does.
  std::function<std::function<void(KernelContext&)>(const Node&, device::DeviceKind)> bind_kernel{};
  // Null: the op is not differentiable (autodiff raises naming the node if a gradient must pass through it).
  std::function<std::vector<std::optional<Output>>(GradientContext&)> gradient{};
  // Output 0 may share input 0's memory when this node is that input's last reader (elementwise ops).
  bool may_reuse_input = false;
  // The op mutates its inputs (variable updates) or has effects beyond its outputs; never pruned or reused.
  bool stateful = false;
  // Takes one or more inputs (lists, e.g. the multi-tensor updates): num_inputs is not checked, `infer` checks
  // the count. Unlike a collective, every input is on the node's device (the executor copies as for any op).
  bool variadic = false;
  // A collective (AllReduce): it takes one or more inputs, each on its own device, and num_inputs and
  // num_outputs are not checked; output j lives on the device of input j % inputs. The executor leaves its
  // inputs where they are (no copies) and its kernel moves data between the devices itself.
  bool collective = false;
};

// Invariants: names are unique; every definition has `infer`; a definition is never removed or changed once
// added, so the references get() returns stay valid for the registry's life.
class OpRegistry {
 public:
  OpRegistry() = default;  // empty; global() is the one with the built-in ops
  OpRegistry(const OpRegistry&) = delete;
  OpRegistry& operator=(const OpRegistry&) = delete;

  // The process's registry, with every built-in op registered (on first use: registration does not rely on
  // static initialisers, which a static library may drop), and the ops higher layers have added since.
  static OpRegistry& global();

  // Throws tp::InvalidArgument when the name is taken or empty, the definition lacks inference, or an arity
  // is negative. Thread-safe (lookups may run concurrently).
  void add(OpDef definition);
  // Throws tp::InvalidArgument naming the op and listing the registered ones.
  const OpDef& get(std::string_view name) const;
  const OpDef* find(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted

 private:
  mutable std::shared_mutex mutex_;  // guards ops_ (the map, not the definitions: those never change)
  std::map<std::string, std::unique_ptr<OpDef>, std::less<>> ops_;
};

}  // namespace tp::graph

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Graph: the IR a model builds and a Session runs. Nodes are op applications; each node has typed outputs
// (edges are `Output`s: output `index` of node `node`), data inputs, control inputs (nodes that must run
// first, with no data flowing), attributes, an optional device constraint and an optional colocation group.
//
// Shapes may be partly unknown at build time (-1, e.g. the batch dimension of a placeholder); a Session
// specialises the graph for the concrete feed shapes (infer_types) before planning and running it.
//
// Invariants: node ids are dense indexes in insertion order; every input and control input names an earlier
// node, so insertion order is a topological order and a graph built through add() has no cycle (validate()
// also checks graphs assembled otherwise); node names are unique.

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tensorpool/core/dtype.hpp"
#include "tensorpool/core/shape.hpp"

namespace tp::graph {

using NodeId = std::int32_t;

struct Output {
  NodeId node = -1;
  int index = 0;
  friend auto operator<=>(const Output&, const Output&) = default;
};

// A tensor's static type. Dims of -1 are unknown until feeds fix them.
struct TensorType {
  DType dtype = DType::f32;
  std::vector<std::int64_t> dims;

  [[nodiscard]] bool fully_defined() const;
  [[nodiscard]] Shape shape() const;  // throws tp::InvalidArgument when a dim is unknown
  std::string to_string() const;      // "float32[-1,784]"
  friend bool operator==(const TensorType&, const TensorType&) = default;
};

std::ostream& operator<<(std::ostream& stream, const TensorType& type);  // writes to_string()

// Attribute values. Literals pick the expected alternative: 1 -> int64, 0.5 -> double, true -> bool,
// "x" -> string; lists must be spelled std::vector<std::int64_t>{...}. Typed getters: attributes.hpp.
using AttrValue = std::variant<std::int64_t, double, bool, std::string, std::vector<std::int64_t>, DType>;
using Attributes = std::map<std::string, AttrValue, std::less<>>;

struct Node {
  NodeId id = -1;
  std::string name;  // unique, e.g. "dense/MatMul"
  std::string op;    // registered op name, e.g. "MatMul"
  std::vector<Output> inputs;
  std::vector<NodeId> control_inputs;
  Attributes attributes;
  std::vector<TensorType> outputs;  // inferred when the node is added
  std::string device;               // requested device ("sim:1"), empty: the placer decides
  std::string colocation_group;     // nodes of one group are placed together, empty: none
};

class Graph {
 public:
  // Adds a node after checking the op exists, the inputs refer to earlier nodes, and inferring its output
  // types (with unknown dims where inputs have them). `name` (default: the op's name) is made unique by
  // appending "_1", "_2"... when taken. Returns output 0 (use add_node for ops with several or no outputs).
  // Throws tp::InvalidArgument naming the node and the mismatch; the graph is unchanged then.
  Output add(std::string_view op, std::vector<Output> inputs, Attributes attributes = {}, std::string_view name = {},
             std::vector<NodeId> control_inputs = {});
  // The node of a multi-output op (all outputs reachable as {id, i}).
  NodeId add_node(std::string_view op, std::vector<Output> inputs, Attributes attributes = {},
                  std::string_view name = {}, std::vector<NodeId> control_inputs = {});

  const Node& node(NodeId id) const;  // throws tp::InvalidArgument for a bad id
  // For passes that edit a node in place and for tests that assemble bad graphs. Edits bypass add()'s checks:
  // call validate() afterwards. Renaming a node is seen by find() (which then also scans the nodes).
  Node& mutable_node(NodeId id);
  // Sets a node's requested device and colocation group (what the placer and autodiff change); unlike
  // mutable_node() it cannot rename, so find() stays a map lookup.
  void set_placement(NodeId id, std::string device, std::string colocation_group);
  const std::vector<Node>& nodes() const noexcept { return nodes_; }
  std::size_t size() const noexcept { return nodes_.size(); }
  [[nodiscard]] std::optional<NodeId> find(std::string_view name) const;
  // Throws tp::InvalidArgument naming the node when `output` is not one of its outputs.
  [[nodiscard]] const TensorType& type_of(Output output) const;

  // Checks every structural invariant (ids, known ops, arity against the registry, input references to
  // existing outputs, acyclicity, inputs before their consumers, unique names) and re-runs type inference,
  // which must reproduce each node's stored output types; throws tp::InvalidArgument naming the first
  // offending node and the mismatch.
  void validate() const;

 private:
  std::vector<Node> nodes_;
  std::map<std::string, NodeId, std::less<>> by_name_;  // names given by add(); renames are not reflected
  bool edited_ = false;  // mutable_node() was called: by_name_ may miss renamed nodes, so find() also scans
};

// The nodes `roots` depend on through data and control inputs, transitively, roots included: a vector of
// graph.size() flags indexed by NodeId. Assumes a validated graph (inputs before consumers).
[[nodiscard]] std::vector<bool> ancestors(const Graph& graph, std::span<const NodeId> roots);

}  // namespace tp::graph

// SPDX-License-Identifier: Apache-2.0
#include <ostream>
#include <string>

#include "graph/graph_internal.hpp"

namespace tp::graph {

bool TensorType::fully_defined() const {
  for (std::int64_t dim : dims) {
    if (dim < 0) return false;
  }
  return true;
}

Shape TensorType::shape() const {
  if (!fully_defined()) {
    TP_THROW(InvalidArgument, detail::kComponent, "type ", to_string(),
             " has unknown dims (-1); feed the placeholders (infer_types) to fix them");
  }
  return Shape(dims);
}

// Without a stream: a session builds its executable cache key from these at every run.
std::string TensorType::to_string() const {
  std::string text(name_of(dtype));
  text += '[';
  for (std::size_t index = 0; index < dims.size(); ++index) {
    if (index != 0) text += ',';
    text += std::to_string(dims[index]);
  }
  text += ']';
  return text;
}

std::ostream& operator<<(std::ostream& stream, const TensorType& type) { return stream << type.to_string(); }

namespace detail {

std::string describe_types(const std::vector<TensorType>& types) {
  std::string text = "[";
  for (std::size_t index = 0; index < types.size(); ++index) {
    text += (index == 0 ? "" : ", ") + types[index].to_string();
  }
  return text + "]";
}

std::vector<TensorType> infer_outputs(const OpDef& definition, const Node& node, std::vector<TensorType> input_types) {
  std::vector<TensorType> outputs = definition.infer(InferenceContext{node, std::move(input_types)});
  if (!definition.collective && outputs.size() != static_cast<std::size_t>(definition.num_outputs)) {
    TP_GRAPH_FAIL(node, "inference returned ", outputs.size(), " output types but the op declares ",
                  definition.num_outputs, " outputs (a bug in the op's definition)");
  }
  for (const TensorType& type : outputs) {
    for (std::int64_t dim : type.dims) {
      if (dim < -1) TP_GRAPH_FAIL(node, "inference produced ", type, "; dims must be >= 0 or -1 (unknown)");
    }
  }
  return outputs;
}

}  // namespace detail
}  // namespace tp::graph

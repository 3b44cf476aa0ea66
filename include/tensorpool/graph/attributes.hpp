// SPDX-License-Identifier: Apache-2.0
#pragma once
// Typed reads of a node's attributes. A missing attribute without a default, or one holding another type,
// throws tp::InvalidArgument naming the node, the attribute, the expected type and (when present) the type
// it holds: "MatMul 'dense/MatMul': attribute 'transpose_a' holds int64 1 but bool is expected".
//
// The only conversion is int64 -> double in attribute_float (alpha = 1 means 1.0); no other coercion.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/graph/graph.hpp"

namespace tp::graph {

[[nodiscard]] std::int64_t attribute_int(const Node& node, std::string_view name);
[[nodiscard]] std::int64_t attribute_int(const Node& node, std::string_view name, std::int64_t default_value);

[[nodiscard]] double attribute_float(const Node& node, std::string_view name);
[[nodiscard]] double attribute_float(const Node& node, std::string_view name, double default_value);

[[nodiscard]] bool attribute_bool(const Node& node, std::string_view name);
[[nodiscard]] bool attribute_bool(const Node& node, std::string_view name, bool default_value);

[[nodiscard]] DType attribute_dtype(const Node& node, std::string_view name);
[[nodiscard]] DType attribute_dtype(const Node& node, std::string_view name, DType default_value);

[[nodiscard]] std::vector<std::int64_t> attribute_ints(const Node& node, std::string_view name);
[[nodiscard]] std::vector<std::int64_t> attribute_ints(const Node& node, std::string_view name,
                                                       const std::vector<std::int64_t>& default_value);

[[nodiscard]] std::string attribute_string(const Node& node, std::string_view name);
[[nodiscard]] std::string attribute_string(const Node& node, std::string_view name, std::string_view default_value);

// "int64", "float", "bool", "string", "ints", "dtype": the names the errors use for each alternative.
std::string_view attribute_type_name(const AttrValue& value) noexcept;
// The value as text ("1", "0.5", "true", "'logits'", "[-1,784]", "float32").
std::string to_string(const AttrValue& value);

}  // namespace tp::graph

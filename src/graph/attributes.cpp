// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/graph/attributes.hpp"

#include <sstream>

#include "graph/graph_internal.hpp"

namespace tp::graph {

namespace {

const AttrValue* lookup(const Node& node, std::string_view name) {
  const auto entry = node.attributes.find(name);
  return entry == node.attributes.end() ? nullptr : &entry->second;
}

[[noreturn]] void missing(const Node& node, std::string_view name, std::string_view expected) {
  TP_GRAPH_FAIL(node, "missing required attribute '", name, "' (", expected, ")");
}

[[noreturn]] void wrong_type(const Node& node, std::string_view name, const AttrValue& value,
                             std::string_view expected) {
  TP_GRAPH_FAIL(node, "attribute '", name, "' holds ", attribute_type_name(value), " ", to_string(value), " but ",
                expected, " is expected");
}

// The attribute as a T, `fallback` when absent (or an error when there is none).
template <typename T>
T typed(const Node& node, std::string_view name, std::string_view expected, const T* fallback) {
  const AttrValue* value = lookup(node, name);
  if (value == nullptr) {
    if (fallback == nullptr) missing(node, name, expected);
    return *fallback;
  }
  if (const T* held = std::get_if<T>(value)) return *held;
  wrong_type(node, name, *value, expected);
}

double as_float(const Node& node, std::string_view name, const double* fallback) {
  const AttrValue* value = lookup(node, name);
  if (value == nullptr) {
    if (fallback == nullptr) missing(node, name, "float");
    return *fallback;
  }
  if (const double* held = std::get_if<double>(value)) return *held;
  if (const std::int64_t* held = std::get_if<std::int64_t>(value)) return static_cast<double>(*held);
  wrong_type(node, name, *value, "float");
}

}  // namespace

std::int64_t attribute_int(const Node& node, std::string_view name) {
  return typed<std::int64_t>(node, name, "int64", nullptr);
}
std::int64_t attribute_int(const Node& node, std::string_view name, std::int64_t default_value) {
  return typed<std::int64_t>(node, name, "int64", &default_value);
}

double attribute_float(const Node& node, std::string_view name) { return as_float(node, name, nullptr); }
double attribute_float(const Node& node, std::string_view name, double default_value) {
  return as_float(node, name, &default_value);
}

bool attribute_bool(const Node& node, std::string_view name) { return typed<bool>(node, name, "bool", nullptr); }
bool attribute_bool(const Node& node, std::string_view name, bool default_value) {
  return typed<bool>(node, name, "bool", &default_value);
}

DType attribute_dtype(const Node& node, std::string_view name) { return typed<DType>(node, name, "dtype", nullptr); }
DType attribute_dtype(const Node& node, std::string_view name, DType default_value) {
  return typed<DType>(node, name, "dtype", &default_value);
}

std::vector<std::int64_t> attribute_ints(const Node& node, std::string_view name) {
  return typed<std::vector<std::int64_t>>(node, name, "ints", nullptr);
}
std::vector<std::int64_t> attribute_ints(const Node& node, std::string_view name,
                                         const std::vector<std::int64_t>& default_value) {
  return typed<std::vector<std::int64_t>>(node, name, "ints", &default_value);
}

std::string attribute_string(const Node& node, std::string_view name) {
  return typed<std::string>(node, name, "string", nullptr);
}
std::string attribute_string(const Node& node, std::string_view name, std::string_view default_value) {
  const std::string fallback(default_value);
  return typed<std::string>(node, name, "string", &fallback);
}

std::string_view attribute_type_name(const AttrValue& value) noexcept {
  constexpr std::string_view kNames[] = {"int64", "float", "bool", "string", "ints", "dtype"};
  return kNames[value.index()];
}

std::string to_string(const AttrValue& value) {
  std::ostringstream stream;
  std::visit(
      [&stream]<typename T>(const T& held) {
        if constexpr (std::is_same_v<T, bool>) {
          stream << (held ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::string>) {
          stream << "'" << held << "'";
        } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          stream << "[";
          for (std::size_t index = 0; index < held.size(); ++index) stream << (index == 0 ? "" : ",") << held[index];
          stream << "]";
        } else {
          stream << held;
        }
      },
      value);
  return stream.str();
}

}  // namespace tp::graph

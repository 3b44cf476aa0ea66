// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/graph/op_registry.hpp"

#include <mutex>

#include "graph/graph_internal.hpp"
#include "graph/ops/op_support.hpp"

namespace tp::graph {

namespace {

void register_builtin_ops(OpRegistry& registry) {
  detail::register_io_ops(registry);
  detail::register_linalg_ops(registry);
  detail::register_nn_ops(registry);
  detail::register_math_ops(registry);
  detail::register_array_ops(registry);
  detail::register_reduce_ops(registry);
  detail::register_state_ops(registry);
}

}  // namespace

OpRegistry& OpRegistry::global() {
  // Both statics are initialised once, thread-safely, in this order: the built-ins register on first use,
  // from code this function references (an unreferenced static initialiser in a static library may be
  // dropped by the linker).
  static OpRegistry registry;
  static const bool registered = (register_builtin_ops(registry), true);
  (void)registered;
  return registry;
}

void OpRegistry::add(OpDef definition) {
  if (definition.name.empty()) TP_THROW(InvalidArgument, detail::kComponent, "an op definition needs a name");
  if (!definition.infer) {
    TP_THROW(InvalidArgument, detail::kComponent, "op '", definition.name, "' has no type inference function");
  }
  if (definition.num_inputs < 0 || definition.num_outputs < 0) {
    TP_THROW(InvalidArgument, detail::kComponent, "op '", definition.name, "' declares ", definition.num_inputs,
             " inputs and ", definition.num_outputs, " outputs; both must be >= 0");
  }
  std::unique_lock lock(mutex_);
  std::string name = definition.name;
  const auto [entry, inserted] = ops_.emplace(std::move(name), nullptr);
  if (!inserted) TP_THROW(InvalidArgument, detail::kComponent, "op '", definition.name, "' is already registered");
  entry->second = std::make_unique<OpDef>(std::move(definition));
}

const OpDef& OpRegistry::get(std::string_view name) const {
  const OpDef* definition = find(name);
  if (definition == nullptr) {
    std::string names;
    for (const std::string& known : this->names()) names += (names.empty() ? "" : ", ") + known;
    TP_THROW(InvalidArgument, detail::kComponent, "unknown op '", name, "'; registered ops: ", names);
  }
  return *definition;
}

const OpDef* OpRegistry::find(std::string_view name) const {
  std::shared_lock lock(mutex_);
  const auto entry = ops_.find(name);
  return entry == ops_.end() ? nullptr : entry->second.get();
}

std::vector<std::string> OpRegistry::names() const {
  std::shared_lock lock(mutex_);
  std::vector<std::string> result;
  for (const auto& entry : ops_) result.push_back(entry.first);
  return result;
}

}  // namespace tp::graph

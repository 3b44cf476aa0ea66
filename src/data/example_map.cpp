// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/data/example_map.hpp"

#include <cmath>
#include <sstream>

#include "tensorpool/core/error.hpp"

namespace tp::data {

ExampleMap ExampleMap::normalize() { return ExampleMap("normalize", 255.0f, {}); }

ExampleMap ExampleMap::divide_by(float divisor) {
  if (!std::isfinite(divisor) || divisor == 0.0f) {
    TP_THROW(InvalidArgument, "data", "ExampleMap::divide_by(", divisor, "): the divisor must be finite and non-zero");
  }
  std::ostringstream name;
  name << "divide_by(" << divisor << ")";
  return ExampleMap(name.str(), divisor, {});
}

ExampleMap ExampleMap::custom(std::string name, Function function) {
  if (!function) TP_THROW(InvalidArgument, "data", "ExampleMap::custom(\"", name, "\"): the function is empty");
  return ExampleMap(std::move(name), std::nullopt, std::move(function));
}

void ExampleMap::apply(std::span<float> features) const {
  if (divisor_) {
    const float divisor = *divisor_;
    for (float& value : features) value = value / divisor;
    return;
  }
  function_(features);
}

}  // namespace tp::data

// SPDX-License-Identifier: Apache-2.0
#pragma once
// A numpy array that takes ownership of a std::vector's elements (no copy): the vector lives in a capsule that
// numpy releases with the array.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tp::python {

template <typename T>
nanobind::object to_numpy(std::vector<T> values, const std::vector<std::int64_t>& dims) {
  auto* owned = new std::vector<T>(std::move(values));
  nanobind::capsule owner(owned, [](void* pointer) noexcept { delete static_cast<std::vector<T>*>(pointer); });
  std::vector<std::size_t> shape(dims.begin(), dims.end());
  return nanobind::cast(nanobind::ndarray<nanobind::numpy, T>(owned->data(), shape.size(), shape.data(), owner));
}

}  // namespace tp::python

// SPDX-License-Identifier: Apache-2.0
#pragma once
// The extents of a tensor. A Shape always holds non-negative dims (the constructors reject negative ones,
// naming the dim); rank 0 is a scalar with one element. Element and byte counts are overflow-checked.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <vector>

#include "tensorpool/core/dtype.hpp"

namespace tp {

class Shape {
 public:
  Shape() = default;  // a scalar: rank 0, one element
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::vector<std::int64_t> dims);

  std::size_t rank() const noexcept { return dims_.size(); }
  const std::vector<std::int64_t>& dims() const noexcept { return dims_; }

  // Throws tp::InvalidArgument naming the index and the shape unless 0 <= index < rank().
  [[nodiscard]] std::int64_t dim(std::int64_t index) const;

  // Product of the dims (1 for a scalar, 0 if any dim is 0). Throws tp::InvalidArgument naming the shape
  // if the product does not fit in int64.
  [[nodiscard]] std::int64_t num_elements() const;

  // "[784,512]"; a scalar is "[]".
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const Shape&, const Shape&) = default;

 private:
  std::vector<std::int64_t> dims_;  // invariant: every entry >= 0
};

std::ostream& operator<<(std::ostream& stream, const Shape& shape);

// num_elements() x size_of(dtype). Throws tp::InvalidArgument naming the shape and dtype if either the
// element count or the byte count overflows.
[[nodiscard]] std::size_t byte_size(const Shape& shape, DType dtype);

}  // namespace tp

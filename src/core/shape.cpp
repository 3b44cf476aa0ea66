// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/shape.hpp"

#include <algorithm>
#include <limits>
#include <ostream>
#include <utility>

#include "tensorpool/core/error.hpp"

namespace tp {
namespace {

std::string format_dims(std::span<const std::int64_t> dims) {
  std::string text = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i != 0) text += ',';
    text += std::to_string(dims[i]);
  }
  text += ']';
  return text;
}

void check_dims(std::span<const std::int64_t> dims) {
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      TP_THROW(InvalidArgument, "core", "shape ", format_dims(dims), ": dim ", i, " is negative (", dims[i],
               "); dims must be >= 0");
    }
  }
}

}  // namespace

Shape::Shape(std::initializer_list<std::int64_t> dims)
    : Shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const std::int64_t> dims) : rank_(dims.size()) {
  check_dims(dims);
  if (dims.size() > kInlineRank) heap_ = std::make_unique_for_overwrite<std::int64_t[]>(dims.size());
  std::copy(dims.begin(), dims.end(), heap_ != nullptr ? heap_.get() : inline_.data());
}

Shape::Shape(const Shape& other) : inline_(other.inline_), rank_(other.rank_) {
  if (other.heap_ == nullptr) return;
  heap_ = std::make_unique_for_overwrite<std::int64_t[]>(rank_);
  std::copy(other.heap_.get(), other.heap_.get() + rank_, heap_.get());
}

Shape::Shape(Shape&& other) noexcept
    : inline_(other.inline_), heap_(std::move(other.heap_)), rank_(std::exchange(other.rank_, 0)) {}

Shape& Shape::operator=(const Shape& other) {
  if (this != &other) *this = Shape(other);
  return *this;
}

Shape& Shape::operator=(Shape&& other) noexcept {
  inline_ = other.inline_;
  heap_ = std::move(other.heap_);
  rank_ = std::exchange(other.rank_, 0);
  return *this;
}

bool operator==(const Shape& a, const Shape& b) noexcept { return std::ranges::equal(a.dims(), b.dims()); }

std::int64_t Shape::dim(std::int64_t index) const {
  if (index < 0 || static_cast<std::size_t>(index) >= rank_) {
    TP_THROW(InvalidArgument, "core", "dim index ", index, " is out of range for shape ", to_string(), " (rank ", rank_,
             ")");
  }
  return dims()[static_cast<std::size_t>(index)];
}

std::int64_t Shape::num_elements() const {
  for (std::int64_t extent : dims()) {
    if (extent == 0) return 0;  // even if the other dims alone would overflow
  }
  std::int64_t product = 1;
  for (std::int64_t extent : dims()) {
    if (product > std::numeric_limits<std::int64_t>::max() / extent) {
      TP_THROW(InvalidArgument, "core", "shape ", to_string(), " has more elements than fit in int64");
    }
    product *= extent;
  }
  return product;
}

std::string Shape::to_string() const { return format_dims(dims()); }

std::ostream& operator<<(std::ostream& stream, const Shape& shape) { return stream << shape.to_string(); }

std::size_t byte_size(const Shape& shape, DType dtype) {
  const auto elements = static_cast<std::uint64_t>(shape.num_elements());
  const std::size_t element_size = size_of(dtype);
  if (elements > std::numeric_limits<std::size_t>::max() / element_size) {
    TP_THROW(InvalidArgument, "core", "shape ", shape.to_string(), " of ", name_of(dtype),
             " needs more bytes than fit in size_t (", size_of(dtype), " x ", elements, ")");
  }
  return static_cast<std::size_t>(elements) * element_size;
}

}  // namespace tp

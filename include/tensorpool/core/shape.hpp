// SPDX-License-Identifier: Apache-2.0
#pragma once
// The extents of a tensor. A Shape always holds non-negative dims (the constructors reject negative ones,
// naming the dim); rank 0 is a scalar with one element. Element and byte counts are overflow-checked.
//
// Dims up to kInlineRank are stored in the Shape itself, so copying the Shape of a tensor of up to that rank
// allocates nothing: a tensor is copied into every kernel a host thread launches and freed on the stream's
// thread, and a heap block per copy made a malloc on one thread and a free on another for each (as
// TensorFlow's TensorShape and PyTorch's sizes keep small ranks inline). Larger ranks go to the heap.

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorpool/core/dtype.hpp"

namespace tp {

class Shape {
 public:
  static constexpr std::size_t kInlineRank = 6;

  Shape() = default;  // a scalar: rank 0, one element
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::span<const std::int64_t> dims);
  explicit Shape(const std::vector<std::int64_t>& dims) : Shape(std::span<const std::int64_t>(dims)) {}
  Shape(const Shape& other);  // copies the dims as they are: a Shape's dims are valid
  Shape(Shape&& other) noexcept;
  Shape& operator=(const Shape& other);
  Shape& operator=(Shape&& other) noexcept;
  ~Shape() = default;

  std::size_t rank() const noexcept { return rank_; }
  std::span<const std::int64_t> dims() const noexcept { return {data(), rank_}; }
  // The dims as a vector, for APIs that keep their own copy.
  [[nodiscard]] std::vector<std::int64_t> dims_vector() const { return {data(), data() + rank_}; }

  // Throws tp::InvalidArgument naming the index and the shape unless 0 <= index < rank().
  [[nodiscard]] std::int64_t dim(std::int64_t index) const;

  // Product of the dims (1 for a scalar, 0 if any dim is 0). Throws tp::InvalidArgument naming the shape
  // if the product does not fit in int64.
  [[nodiscard]] std::int64_t num_elements() const;

  // "[784,512]"; a scalar is "[]".
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const Shape& a, const Shape& b) noexcept;

 private:
  const std::int64_t* data() const noexcept { return heap_ != nullptr ? heap_.get() : inline_.data(); }

  // Invariant: every dim >= 0; they are inline_[0, rank_) when rank_ <= kInlineRank (heap_ null), else
  // heap_[0, rank_).
  std::array<std::int64_t, kInlineRank> inline_{};
  std::unique_ptr<std::int64_t[]> heap_;
  std::size_t rank_ = 0;
};

std::ostream& operator<<(std::ostream& stream, const Shape& shape);

// num_elements() x size_of(dtype). Throws tp::InvalidArgument naming the shape and dtype if either the
// element count or the byte count overflows.
[[nodiscard]] std::size_t byte_size(const Shape& shape, DType dtype);

}  // namespace tp

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Tensor: a shape and dtype over a byte range of one shared Buffer on one device. Views (reshape, slice
// along axis 0) share the buffer; the buffer's memory goes back once the last tensor, view or pending stream
// task holding it is gone.
//
// Accounting: nbytes() = elements x dtype size, exactly what the buffer asked the allocator for when the
// tensor is not a view; allocated_bytes() = what the allocator set aside for the whole buffer.
//
// Device memory (sim, cuda) is reached from the host only through copies (from_host, to_vector, copy_to_host,
// to) and kernels running on the device's streams; data() elsewhere throws tp::DeviceError.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/dtype.hpp"
#include "tensorpool/core/element_type.hpp"
#include "tensorpool/core/shape.hpp"
#include "tensorpool/memory/allocation_tag.hpp"

namespace tp {

namespace device {
class Device;
class Stream;
}  // namespace device

// What a tensor's allocation is for; the shape and dtype are added from the tensor itself.
struct TensorTag {  // {} initialisers: designated initialisers may name any subset
  std::string name{};
  memory::AllocationKind kind = memory::AllocationKind::unknown;
  std::string op{};
  std::int64_t step = -1;
};

class Tensor {
 public:
  Tensor() = default;  // undefined (defined() is false)

  // An uninitialised tensor on `device`, its allocation tagged with `tag`, shape and dtype.
  [[nodiscard]] static Tensor empty(const Shape& shape, DType dtype, device::Device& device, const TensorTag& tag = {});
  // A tensor holding `bytes_of(shape, dtype)` bytes copied from host memory `data`, enqueued on `stream`
  // (default: the device's stream 0); `data` may be reused as soon as this returns.
  [[nodiscard]] static Tensor from_host(const void* data, const Shape& shape, DType dtype, device::Device& device,
                                        const TensorTag& tag = {}, device::Stream* stream = nullptr);
  // Throws tp::InvalidArgument naming the shape when values.size() != shape.num_elements().
  template <typename T>
  [[nodiscard]] static Tensor from_vector(std::span<const T> values, const Shape& shape, device::Device& device,
                                          const TensorTag& tag = {}, device::Stream* stream = nullptr);

  // A view of `shape` and `dtype` over `buffer` from `offset_bytes` (the executor's planned tensors inside
  // one arena). Throws tp::InvalidArgument naming the range when it does not fit in the buffer.
  [[nodiscard]] static Tensor from_buffer(std::shared_ptr<Buffer> buffer, std::size_t offset_bytes, const Shape& shape,
                                          DType dtype);

  bool defined() const noexcept { return buffer_ != nullptr; }
  const Shape& shape() const noexcept { return shape_; }
  DType dtype() const noexcept { return dtype_; }
  // Throws tp::InvalidArgument when the tensor is undefined (as do all accessors below).
  device::Device& device() const;
  std::int64_t num_elements() const { return shape_.num_elements(); }
  [[nodiscard]] std::size_t nbytes() const { return byte_size(shape_, dtype_); }
  [[nodiscard]] std::size_t allocated_bytes() const;
  std::size_t offset_bytes() const noexcept { return offset_bytes_; }
  const std::shared_ptr<Buffer>& buffer() const noexcept { return buffer_; }
  const std::string& name() const;

  // Same elements, new shape; throws tp::InvalidArgument naming both shapes when the counts differ.
  [[nodiscard]] Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) along axis 0; throws tp::InvalidArgument naming the range and the shape.
  [[nodiscard]] Tensor slice(std::int64_t begin, std::int64_t end) const;

  // The first element's address (see the header comment for who may touch it).
  void* data() const;
  // Also checks that T is the tensor's element type, naming both on a mismatch.
  template <typename T>
  T* data() const {
    check_element_type(dtype_of<T>());
    return static_cast<T*>(data());
  }

  // Copies the elements to host memory `dst` (nbytes() bytes) in `stream`'s order (default stream 0) and
  // returns once they are there.
  void copy_to_host(void* dst, device::Stream* stream = nullptr) const;
  template <typename T>
  [[nodiscard]] std::vector<T> to_vector(device::Stream* stream = nullptr) const {
    static_assert(!std::is_same_v<T, bool>, "std::vector<bool> packs bits: read a boolean tensor as std::uint8_t");
    check_element_type(dtype_of<T>());
    std::vector<T> values(static_cast<std::size_t>(num_elements()));
    copy_to_host(values.data(), stream);
    return values;
  }
  // A copy on `target` (stream order on both sides; defaults are each device's stream 0), tagged `tag` (or
  // this tensor's tag when the name is empty).
  [[nodiscard]] Tensor to(device::Device& target, const TensorTag& tag = {}, device::Stream* source_stream = nullptr,
                          device::Stream* target_stream = nullptr) const;

 private:
  Tensor(std::shared_ptr<Buffer> buffer, Shape shape, DType dtype, std::size_t offset_bytes)
      : buffer_(std::move(buffer)), shape_(std::move(shape)), dtype_(dtype), offset_bytes_(offset_bytes) {}
  void check_defined(const char* what) const;
  void check_element_type(DType requested) const;

  std::shared_ptr<Buffer> buffer_;
  Shape shape_;
  DType dtype_ = DType::f32;
  std::size_t offset_bytes_ = 0;  // invariant: offset_bytes_ + nbytes() <= buffer_->bytes()
};

template <typename T>
Tensor Tensor::from_vector(std::span<const T> values, const Shape& shape, device::Device& device, const TensorTag& tag,
                           device::Stream* stream) {
  check_element_count(values.size(), shape);
  return from_host(values.data(), shape, dtype_of<T>(), device, tag, stream);
}

}  // namespace tp

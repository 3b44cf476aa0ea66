// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/tensor.hpp"

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/device/stream.hpp"

namespace tp {

void check_element_count(std::size_t count, const Shape& shape) {
  if (static_cast<std::int64_t>(count) != shape.num_elements()) {
    TP_THROW(InvalidArgument, "tensor", count, " host values cannot fill shape ", shape, " of ", shape.num_elements(),
             " elements");
  }
}

namespace {

memory::AllocationTag allocation_tag(const TensorTag& tag, const Shape& shape, DType dtype) {
  memory::AllocationTag result;
  result.name = tag.name;
  result.op = tag.op;
  result.shape = shape.dims_vector();
  result.dtype = std::string(name_of(dtype));
  result.kind = tag.kind;
  result.step = tag.step;
  return result;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, device::Device& device, const TensorTag& tag) {
  const std::size_t bytes = byte_size(shape, dtype);
  return Tensor(device.allocate(bytes, allocation_tag(tag, shape, dtype)), shape, dtype, 0);
}

Tensor Tensor::from_host(const void* data, const Shape& shape, DType dtype, device::Device& device,
                         const TensorTag& tag, device::Stream* stream) {
  Tensor tensor = empty(shape, dtype, device, tag);
  device::Stream& target = stream != nullptr ? *stream : device.stream(0);
  device.copy_from_host(target, data, tensor.buffer_, 0, tensor.nbytes());
  return tensor;
}

Tensor Tensor::from_buffer(std::shared_ptr<Buffer> buffer, std::size_t offset_bytes, const Shape& shape, DType dtype) {
  if (buffer == nullptr) TP_THROW(InvalidArgument, "tensor", "from_buffer: the buffer is null");
  const std::size_t bytes = byte_size(shape, dtype);
  if (offset_bytes > buffer->bytes() || bytes > buffer->bytes() - offset_bytes) {
    TP_THROW(InvalidArgument, "tensor", "from_buffer: ", name_of(dtype), shape, " at offset ", offset_bytes, " needs ",
             bytes, " bytes but the buffer '", buffer->tag().name, "' holds ", buffer->bytes());
  }
  return Tensor(std::move(buffer), shape, dtype, offset_bytes);
}

void Tensor::check_defined(const char* what) const {
  if (buffer_ == nullptr) TP_THROW(InvalidArgument, "tensor", what, " of an undefined tensor (default-constructed)");
}

void Tensor::check_element_type(DType requested) const {
  check_defined("element access");
  if (requested != dtype_) {
    TP_THROW(InvalidArgument, "tensor", "tensor '", name(), "' holds ", name_of(dtype_), shape_, ", not ",
             name_of(requested));
  }
}

device::Device& Tensor::device() const {
  check_defined("device()");
  return buffer_->device();
}

std::size_t Tensor::allocated_bytes() const {
  check_defined("allocated_bytes()");
  return buffer_->allocated_bytes();
}

const std::string& Tensor::name() const {
  static const std::string kUndefined = "<undefined>";
  return buffer_ != nullptr ? buffer_->tag().name : kUndefined;
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined("reshape");
  if (shape.num_elements() != shape_.num_elements()) {
    TP_THROW(InvalidArgument, "tensor", "cannot reshape '", name(), "' from ", shape_, " (", shape_.num_elements(),
             " elements) to ", shape, " (", shape.num_elements(), " elements)");
  }
  return Tensor(buffer_, shape, dtype_, offset_bytes_);
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  check_defined("slice");
  if (shape_.rank() == 0) TP_THROW(InvalidArgument, "tensor", "cannot slice the scalar '", name(), "' along axis 0");
  const std::int64_t rows = shape_.dim(0);
  if (begin < 0 || end < begin || end > rows) {
    TP_THROW(InvalidArgument, "tensor", "slice [", begin, ", ", end, ") along axis 0 is outside '", name(),
             "' of shape ", shape_, "; need 0 <= begin <= end <= ", rows);
  }
  std::vector<std::int64_t> dims = shape_.dims_vector();
  dims[0] = 1;
  const std::size_t row_bytes = byte_size(Shape(dims), dtype_);
  dims[0] = end - begin;
  return Tensor(buffer_, Shape(dims), dtype_, offset_bytes_ + static_cast<std::size_t>(begin) * row_bytes);
}

void* Tensor::data() const {
  check_defined("data()");
  return static_cast<char*>(buffer_->data()) + offset_bytes_;
}

void Tensor::copy_to_host(void* dst, device::Stream* stream) const {
  check_defined("copy_to_host");
  device::Device& owner = buffer_->device();
  owner.copy_to_host(stream != nullptr ? *stream : owner.stream(0), buffer_, offset_bytes_, dst, nbytes());
}

Tensor Tensor::to(device::Device& target, const TensorTag& tag, device::Stream* source_stream,
                  device::Stream* target_stream) const {
  check_defined("to()");
  TensorTag copy_tag = tag;
  if (copy_tag.name.empty()) {
    const memory::AllocationTag& own = buffer_->tag();
    copy_tag = TensorTag{own.name, own.kind, own.op, own.step};
  }
  Tensor result = empty(shape_, dtype_, target, copy_tag);
  device::Device& source = buffer_->device();
  device::copy(source_stream != nullptr ? *source_stream : source.stream(0), buffer_, offset_bytes_,
               target_stream != nullptr ? *target_stream : target.stream(0), result.buffer_, 0, nbytes());
  return result;
}

}  // namespace tp

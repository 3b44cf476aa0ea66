// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/host_tensor.hpp"

#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/shape.hpp"

namespace tp::train {

HostTensor to_host(const Tensor& tensor) {
  if (!tensor.defined()) TP_THROW(InvalidArgument, "train", "to_host: the tensor is undefined (default-constructed)");
  HostTensor host;
  host.dtype = tensor.dtype();
  host.dims = tensor.shape().dims_vector();
  host.bytes.resize(tensor.nbytes());
  if (!host.bytes.empty()) tensor.copy_to_host(host.bytes.data());
  return host;
}

void check_host_tensor(const HostTensor& host, const char* what) {
  for (std::int64_t dim : host.dims) {
    if (dim < 0) TP_THROW(InvalidArgument, "train", what, ": host tensor has a negative dim ", dim);
  }
  const Shape shape(host.dims);  // also rejects element and byte counts that overflow
  const std::size_t expected = byte_size(shape, host.dtype);
  if (host.bytes.size() != expected) {
    TP_THROW(InvalidArgument, "train", what, ": host tensor ", name_of(host.dtype), shape, " needs ", expected,
             " bytes but holds ", host.bytes.size());
  }
}

Tensor to_device(const HostTensor& host, device::Device& device, const TensorTag& tag) {
  check_host_tensor(host, "to_device");
  if (host.bytes.empty()) return Tensor::empty(Shape(host.dims), host.dtype, device, tag);
  return Tensor::from_host(host.bytes.data(), Shape(host.dims), host.dtype, device, tag);
}

}  // namespace tp::train

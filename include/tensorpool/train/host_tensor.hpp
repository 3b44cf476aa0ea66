// SPDX-License-Identifier: Apache-2.0
#pragma once
// HostTensor: a tensor's dtype, dims and raw bytes in ordinary host memory, detached from any device. It is
// what checkpoints store and what a restore copies back onto a device.
//
// Invariant (checked by to_device and by the checkpoint reader, not by the struct itself):
// bytes.size() == product(dims) x size_of(dtype), every dim >= 0. Bytes are in host byte order.

#include <cstdint>
#include <vector>

#include "tensorpool/core/dtype.hpp"
#include "tensorpool/core/tensor.hpp"

namespace tp::device {
class Device;
}

namespace tp::train {

struct HostTensor {  // {} initialisers: designated initialisers may name any subset
  DType dtype = DType::f32;
  std::vector<std::int64_t> dims{};
  std::vector<std::uint8_t> bytes{};

  friend bool operator==(const HostTensor&, const HostTensor&) = default;
};

// The elements of `tensor` copied to the host (waits for the copy). Throws tp::InvalidArgument for an
// undefined tensor.
[[nodiscard]] HostTensor to_host(const Tensor& tensor);

// A new tensor on `device` holding `host`'s elements, its allocation tagged `tag`. Throws
// tp::InvalidArgument naming the dims, dtype and byte counts when `host` breaks the invariant above.
[[nodiscard]] Tensor to_device(const HostTensor& host, device::Device& device, const TensorTag& tag = {});

// Throws tp::InvalidArgument (naming `what`) unless `host` satisfies the invariant above.
void check_host_tensor(const HostTensor& host, const char* what);

}  // namespace tp::train

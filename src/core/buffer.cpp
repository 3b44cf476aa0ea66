// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/core/buffer.hpp"

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"
#include "tensorpool/device/stream.hpp"

namespace tp {

Buffer::Buffer(device::Device& device, void* data, std::size_t bytes, std::size_t allocated_bytes,
               memory::AllocationTag tag, std::shared_ptr<memory::MemoryResource> through, bool shared) noexcept
    : device_(device),
      data_(data),
      bytes_(bytes),
      allocated_bytes_(allocated_bytes),
      tag_(std::move(tag)),
      through_(std::move(through)),
      shared_(shared) {}

Buffer::~Buffer() { device_.release(data_, bytes_, through_.get()); }

bool Buffer::host_visible() const noexcept { return shared_ || device_.host_accessible(); }

void* Buffer::data() const {
  if (!host_visible()) {
    const device::Stream* stream = device::Stream::current();
    const bool peer_read = stream != nullptr && device::PeerAccessScope::current() == &device_ &&
                           device::peer_accessible(device_, stream->device());
    if (!peer_read && (stream == nullptr || &stream->device() != &device_)) {
      TP_THROW(DeviceError, "device", "host code touched ", device_.name(), " memory (", tag_.describe(),
               ") outside a kernel or copy on that device's streams; copy it to the host first"
               " (Tensor::to_vector or copy_to_host), or enqueue the code on one of ",
               device_.name(), "'s streams");
    }
  }
  return data_;
}

}  // namespace tp

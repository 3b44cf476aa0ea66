// SPDX-License-Identifier: Apache-2.0
#pragma once
// Buffer: one allocation on one device, shared (through std::shared_ptr) by every tensor and view over it and
// by every stream task that touches it. Its destructor is the only place its memory goes back: to the
// device's memory stack, which records the free against the allocation's tag. Because tasks hold the
// buffers they use, the destructor runs only after the last pending work on it (stream-ordered reuse).

#include <cstddef>
#include <memory>

#include "tensorpool/memory/allocation_tag.hpp"
#include "tensorpool/memory/memory_resource.hpp"

namespace tp {

namespace device {
class Device;
}

class Buffer {
 public:
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  device::Device& device() const noexcept { return device_; }
  // Bytes asked for (what per-tensor accounting sums to the allocator's bytes_requested).
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  // Bytes the allocator set aside for it (its chunk after rounding).
  [[nodiscard]] std::size_t allocated_bytes() const noexcept { return allocated_bytes_; }
  const memory::AllocationTag& tag() const noexcept { return tag_; }

  // Whether host code may read and write the memory directly: the device is host_accessible(), or the
  // buffer came from the device's shared (host-visible) memory (Device::allocate_shared, fine-grained SVM on
  // opencl). Host-visible memory is still ordered by its streams: host code touches it only while no
  // enqueued work uses it (after an event or a synchronize).
  [[nodiscard]] bool host_visible() const noexcept;

  // The device address. Unless host_visible(), only a task running on one of the device's streams may touch
  // it; anywhere else this throws tp::DeviceError naming the device and the fix (copy to the host), so host
  // code cannot silently read device memory.
  void* data() const;

 private:
  friend class device::Device;
  Buffer(device::Device& device, void* data, std::size_t bytes, std::size_t allocated_bytes, memory::AllocationTag tag,
         std::shared_ptr<memory::MemoryResource> through, bool shared) noexcept;

  device::Device& device_;
  // Null iff bytes_ == 0. Changed only by Device::compact, while nothing uses the buffer (its caller's promise),
  // so readers need no synchronisation beyond the stream order that already orders their work.
  void* data_;
  const std::size_t bytes_;
  const std::size_t allocated_bytes_;
  const memory::AllocationTag tag_;
  const std::shared_ptr<memory::MemoryResource> through_;  // where the memory goes back; null: the device's stack
  const bool shared_;  // from the device's shared memory (through_ is that stack): host-visible
};

}  // namespace tp

// SPDX-License-Identifier: Apache-2.0
#pragma once
// HostAddressableDevice: the part the cpu and sim backends share. Their memory is host memory underneath (a
// simulated accelerator's memory is a bounded region of the host's), so the copy primitives are memcpy
// tasks on the device's streams and the poison is a memset. What differs (streams, memory source, whether
// host code may touch the memory, pinned staging) comes from the backend.

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/staging_pool.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::device {

class HostAddressableDevice : public Device {
 protected:
  HostAddressableDevice(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
                        std::unique_ptr<memory::MemoryStack> memory, const DeviceOptions& options, bool pinned_staging)
      : Device(id, physical_id, capacity_bytes, std::move(memory), options),
        staging_(StagingPool::create(id.str(), pinned_staging)) {}

  template <typename StreamType>
  void create_streams(std::size_t count) {
    std::vector<std::unique_ptr<Stream>> streams;
    for (std::size_t index = 0; index < count; ++index) streams.push_back(std::make_unique<StreamType>(*this, index));
    set_streams(std::move(streams));
  }

 public:
  const StagingPool& staging() const noexcept { return *staging_; }
  std::string staging_kind() const override { return staging_->kind(); }

 private:
  static char* address(const std::shared_ptr<Buffer>& buffer, std::size_t offset) {
    return static_cast<char*>(buffer->data()) + offset;  // checked: runs inside a task of the buffer's device
  }

  void enqueue_to_host(Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset, void* host,
                       std::size_t bytes) override {
    stream.enqueue([src, src_offset, host, bytes] { std::memcpy(host, address(src, src_offset), bytes); });
  }
  void enqueue_from_host(Stream& stream, const void* host, const std::shared_ptr<Buffer>& dst, std::size_t dst_offset,
                         std::size_t bytes, std::shared_ptr<void> host_owner) override {
    stream.enqueue([host, dst, dst_offset, bytes, owner = std::move(host_owner)] {
      std::memcpy(address(dst, dst_offset), host, bytes);
    });
  }
  void enqueue_within(Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                      const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes) override {
    stream.enqueue([src, src_offset, dst, dst_offset, bytes] {
      std::memmove(address(dst, dst_offset), address(src, src_offset), bytes);
    });
  }
  // Two accelerators of one process whose memory is host memory underneath reach each other directly, as
  // GPUs with peer access do. The cpu is left out: its inline streams would block the host on the peer.
  bool peer_access(const Device& other) const noexcept override {
    return kind() != DeviceKind::cpu && other.kind() != DeviceKind::cpu &&
           dynamic_cast<const HostAddressableDevice*>(&other) != nullptr;
  }
  // Any host-addressable device's memory, the cpu's included, is host memory this device's tasks can read.
  bool reads_directly(const Device& source) const noexcept override {
    return dynamic_cast<const HostAddressableDevice*>(&source) != nullptr;
  }
  void enqueue_peer(Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                    const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes) override {
    stream.enqueue([src, src_offset, dst, dst_offset, bytes] {
      std::memcpy(static_cast<char*>(unchecked_address(*dst)) + dst_offset,
                  static_cast<const char*>(unchecked_address(*src)) + src_offset, bytes);
    });
  }
  std::shared_ptr<void> staging_buffer(std::size_t bytes) override { return staging_->acquire(bytes); }
  void poison(void* ptr, std::size_t bytes) noexcept override { std::memset(ptr, kPoisonByte, bytes); }

  std::shared_ptr<StagingPool> staging_;
};

}  // namespace tp::device

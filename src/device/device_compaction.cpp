// SPDX-License-Identifier: Apache-2.0
// Device::compact: the owner's side of a compaction (memory/compaction.hpp) for buffers, whose one address
// every Tensor over them reads through Buffer::data().
#include <unordered_map>

#include "core/rekey.hpp"
#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/device.hpp"

namespace tp::device {

memory::CompactionResult Device::compact(std::span<const std::shared_ptr<Buffer>> buffers) {
  // Lets exactly the listed buffers move and gives each its new address. Calls come with the allocator's lock
  // held; they touch only this map and the buffers.
  class BufferRelocator final : public memory::Relocator {
   public:
    explicit BufferRelocator(std::unordered_map<const void*, Buffer*> by_address) noexcept
        : by_address_(std::move(by_address)) {}
    bool can_move(const void* ptr, std::size_t /*bytes*/) override { return by_address_.contains(ptr); }
    void relocated(void* from, void* to, std::size_t /*bytes*/) noexcept override {
      // A block may move again in a later pass: keyed by its new address.
      if (auto* buffer = rekey(by_address_, from, to)) (*buffer)->data_ = to;
    }

   private:
    std::unordered_map<const void*, Buffer*> by_address_;
  };

  std::unordered_map<const void*, Buffer*> by_address;
  for (const std::shared_ptr<Buffer>& buffer : buffers) {
    if (buffer == nullptr) TP_THROW(InvalidArgument, "device", name(), ": compact() was given a null buffer");
    if (&buffer->device_ != this) {
      TP_THROW(InvalidArgument, "device", name(), ": compact() was given a buffer of ", buffer->device_.name(), " (",
               buffer->tag_.describe(), "); pass each device only its own buffers");
    }
    if (buffer->data_ == nullptr || buffer->shared_) continue;  // no memory, or not memory()'s
    by_address.emplace(buffer->data_, buffer.get());
  }
  for (const auto& stream : streams_) {
    if (Stream::current() == stream.get()) {
      TP_THROW(InvalidArgument, "device", name(), ": compact() was called from a task of ", name(),
               "'s stream; call it from host code between steps");
    }
  }
  for (const auto& stream : streams_) stream->wait_idle();
  BufferRelocator relocator(std::move(by_address));
  return memory_->compact(relocator);
}

}  // namespace tp::device

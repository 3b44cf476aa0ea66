// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/device/device.hpp"

#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "tensorpool/core/buffer.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::device {

Device::Device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
               std::unique_ptr<memory::MemoryStack> memory, DeviceOptions options)
    : id_(id),
      physical_id_(physical_id),
      capacity_bytes_(capacity_bytes),
      options_(std::move(options)),
      memory_(std::move(memory)) {
  if (memory_ == nullptr) TP_THROW(InvalidArgument, "device", id_.str(), ": a device needs a memory stack");
  if (options_.num_streams == 0) {
    TP_THROW(InvalidArgument, "device", id_.str(), ": num_streams = 0; a device needs at least one stream");
  }
}

Device::~Device() {
  const std::size_t live = live_buffers();
  if (live != 0) {
    // A buffer that outlives its device would return memory to a destroyed stack: say so loudly.
    TP_LOG(error, "device", id_.str(), " destroyed with ", live, " live buffers; they must be released first");
  }
}

std::shared_ptr<void> Device::extension(const std::string& key, const std::function<std::shared_ptr<void>()>& create) {
  std::lock_guard lock(extensions_mutex_);
  auto found = extensions_.find(key);
  if (found == extensions_.end()) found = extensions_.emplace(key, create()).first;
  return found->second;
}

void Device::set_streams(std::vector<std::unique_ptr<Stream>> streams) { streams_ = std::move(streams); }

void Device::shut_down() noexcept {
  for (const auto& stream : streams_) stream->wait_idle();
  streams_.clear();
}

Stream& Device::stream(std::size_t index) const {
  if (index >= streams_.size()) {
    TP_THROW(InvalidArgument, "device", id_.str(), " has no stream ", index, "; it has ", streams_.size(),
             " (indexes 0..", streams_.size() - 1, ")");
  }
  return *streams_[index];
}

void Device::configure_kernels(const KernelOptions& options) {
  if (options.intra_op_threads < 0) {
    TP_THROW(InvalidArgument, "device", name(), " kernel option intra_op_threads = ", options.intra_op_threads,
             " must be >= 0 (0: unchanged)");
  }
  do_configure_kernels(options);
}

void Device::do_wait_on_host(const Event& event, bool later_work_queued) {
  if (later_work_queued) {
    event.sleep_until_complete();
  } else {
    event.synchronize();
  }
}

void Device::synchronize() {
  for (const auto& stream : streams_) stream->wait_idle();
  for (const auto& stream : streams_) stream->synchronize();
}

void Device::set_shared_memory(std::shared_ptr<memory::MemoryStack> stack, std::string description) {
  shared_memory_ = std::move(stack);
  shared_description_ = std::move(description);
}

std::shared_ptr<Buffer> Device::allocate(std::size_t bytes, const memory::AllocationTag& tag,
                                         std::shared_ptr<memory::MemoryResource> through) {
  if (through == nullptr && shared_memory_ != nullptr) {
    for (const memory::AllocationKind kind : memory_->config().shared_kinds) {
      if (kind == tag.kind) return allocate_from(bytes, tag, shared_memory_, /*shared=*/true);
    }
  }
  return allocate_from(bytes, tag, std::move(through), /*shared=*/false);
}

std::shared_ptr<Buffer> Device::allocate_shared(std::size_t bytes, const memory::AllocationTag& tag) {
  if (shared_memory_ != nullptr) return allocate_from(bytes, tag, shared_memory_, /*shared=*/true);
  return allocate_from(bytes, tag, nullptr, /*shared=*/false);
}

std::string Device::shared_memory_note() const {
  if (shared_memory_ != nullptr) {
    return shared_memory_->config().device + " (" + shared_description_ + "): host code and " + name() +
           "'s kernels share it without copies; reported apart from " + memory_->config().device;
  }
  if (host_accessible()) return name() + "'s memory is host memory: shared allocations come from it";
  return name() + " has no shared memory: shared allocations come from its device memory (not host-visible)";
}

std::shared_ptr<Buffer> Device::allocate_from(std::size_t bytes, const memory::AllocationTag& tag,
                                              std::shared_ptr<memory::MemoryResource> through, bool shared) {
  memory::MemoryResource& resource = through != nullptr ? *through : *memory_;
  void* ptr = nullptr;
  if (bytes != 0) {
    try {
      ptr = resource.allocate(bytes, memory::kDefaultAlignment, tag);
    } catch (const OutOfMemoryError&) {
      bool pending = false;
      for (const auto& stream : streams_) pending = pending || !stream->idle();
      if (!pending) throw;
      // Buffers released while their work was pending come back once it completes.
      for (const auto& stream : streams_) {
        if (Stream::current() != stream.get()) stream->wait_idle();
      }
      ptr = resource.allocate(bytes, memory::kDefaultAlignment, tag);
    }
  }
  const std::size_t allocated = ptr != nullptr ? resource.allocated_size(ptr, bytes) : 0;
  live_buffers_.fetch_add(1, std::memory_order_relaxed);
  try {
    return std::shared_ptr<Buffer>(new Buffer(*this, ptr, bytes, allocated, tag, std::move(through), shared));
  } catch (...) {
    live_buffers_.fetch_sub(1, std::memory_order_relaxed);
    if (ptr != nullptr) resource.deallocate(ptr, bytes);
    throw;
  }
}

void Device::release(void* ptr, std::size_t bytes, memory::MemoryResource* through) noexcept {
  if (ptr != nullptr) {
    if (options_.poison_freed) poison(ptr, bytes);
    (through != nullptr ? *through : *memory_).deallocate(ptr, bytes);
  }
  live_buffers_.fetch_sub(1, std::memory_order_relaxed);
}

namespace {

void check_span(const Device& device, const std::shared_ptr<Buffer>& buffer, std::size_t offset, std::size_t bytes,
                const char* role) {
  if (buffer == nullptr) TP_THROW(InvalidArgument, "device", "copy: the ", role, " buffer is null");
  if (&buffer->device() != &device) {
    TP_THROW(InvalidArgument, "device", "copy: the ", role, " buffer lives on ", buffer->device().name(), ", not on ",
             device.name(), " whose stream was given");
  }
  if (offset > buffer->bytes() || bytes > buffer->bytes() - offset) {
    TP_THROW(InvalidArgument, "device", "copy: ", role, " bytes [", offset, ", ", offset + bytes,
             ") fall outside its buffer of ", buffer->bytes(), " bytes on ", device.name());
  }
}

void check_stream(const Device& device, const Stream& stream) {
  if (&stream.device() != &device) {
    TP_THROW(InvalidArgument, "device", "copy: stream ", stream.name(), " does not belong to ", device.name());
  }
}

}  // namespace

void Device::copy_from_host(Stream& stream, const void* src, const std::shared_ptr<Buffer>& dst, std::size_t dst_offset,
                            std::size_t bytes) {
  check_stream(*this, stream);
  check_span(*this, dst, dst_offset, bytes, "destination");
  if (bytes == 0) return;
  if (src == nullptr) TP_THROW(InvalidArgument, "device", "copy_from_host: the source is null");
  std::shared_ptr<void> staging = staging_buffer(bytes);
  std::memcpy(staging.get(), src, bytes);
  const void* staged = staging.get();
  enqueue_from_host(stream, staged, dst, dst_offset, bytes, std::move(staging));
}

void Device::copy_to_host(Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset, void* dst,
                          std::size_t bytes) {
  check_stream(*this, stream);
  check_span(*this, src, src_offset, bytes, "source");
  if (bytes == 0) return;
  if (dst == nullptr) TP_THROW(InvalidArgument, "device", "copy_to_host: the destination is null");
  if (src->host_visible() && !host_accessible()) {  // shared memory: read in place once the stream is there
    stream.synchronize();
    std::memcpy(dst, static_cast<const char*>(src->data()) + src_offset, bytes);
    return;
  }
  const std::shared_ptr<void> staging = staging_buffer(bytes);
  enqueue_to_host(stream, src, src_offset, staging.get(), bytes);
  stream.synchronize();  // staging stays alive (held here) until the copy has run
  std::memcpy(dst, staging.get(), bytes);
}

HostReadback Device::read_to_host_async(Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                                        std::size_t bytes) {
  check_stream(*this, stream);
  check_span(*this, src, src_offset, bytes, "source");
  HostReadback readback;
  if (bytes > 0 && src->host_visible() && !host_accessible()) {
    // Shared memory: no copy; the bytes alias the buffer, which they keep alive.
    readback.bytes = std::shared_ptr<void>(src, static_cast<char*>(src->data()) + src_offset);
  } else if (bytes > 0) {
    readback.bytes = staging_buffer(bytes);
    enqueue_to_host(stream, src, src_offset, readback.bytes.get(), bytes);
  }
  readback.ready = stream.record();
  return readback;
}

void* Device::unchecked_address(const Buffer& buffer) noexcept { return buffer.data_; }

void Device::enqueue_peer(Stream&, const std::shared_ptr<Buffer>&, std::size_t, const std::shared_ptr<Buffer>&,
                          std::size_t, std::size_t) {
  TP_THROW(DeviceError, "device", name(), " has no peer access; device::copy stages through host memory");
}

void copy(Stream& src_stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset, Stream& dst_stream,
          const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes, SourceRelease release) {
  Device& source = src_stream.device();
  Device& target = dst_stream.device();
  check_span(source, src, src_offset, bytes, "source");
  check_span(target, dst, dst_offset, bytes, "destination");
  if (bytes == 0) return;
  if (&source == &target) {
    if (&src_stream != &dst_stream) dst_stream.wait(src_stream.record());
    target.enqueue_within(dst_stream, src, src_offset, dst, dst_offset, bytes);
    return;
  }
  const bool source_waits = release == SourceRelease::wait_for_read;
  if (source.peer_access(target) || (!source_waits && target.reads_directly(source))) {
    dst_stream.wait(src_stream.record());                                      // the source's bytes are ready
    target.enqueue_peer(dst_stream, src, src_offset, dst, dst_offset, bytes);  // the task holds `src`
    if (source_waits) src_stream.wait(dst_stream.record());  // its later work overwrites them only once read
    return;
  }
  // Through the source's staging memory: the destination's task holds it, and runs only after the source's
  // task has filled it (the event), so it is neither freed nor read early.
  std::shared_ptr<void> staging = source.staging_buffer(bytes);
  void* staged = staging.get();
  source.enqueue_to_host(src_stream, src, src_offset, staged, bytes);
  dst_stream.wait(src_stream.record());
  target.enqueue_from_host(dst_stream, staged, dst, dst_offset, bytes, std::move(staging));
}

bool peer_accessible(const Device& from, const Device& to) noexcept { return &from != &to && from.peer_access(to); }

namespace {
thread_local const Device* peer_read = nullptr;
}  // namespace

PeerAccessScope::PeerAccessScope(const Device& peer) noexcept : outer_(std::exchange(peer_read, &peer)) {}
PeerAccessScope::~PeerAccessScope() { peer_read = outer_; }
const Device* PeerAccessScope::current() noexcept { return peer_read; }

std::vector<Event> copy_concurrently(std::span<const CopyRequest> copies) {
  std::vector<Event> ready;
  for (const CopyRequest& request : copies) ready.push_back(request.src_stream->record());
  std::vector<Event> copied(copies.size());
  std::vector<bool> peer(copies.size(), false);
  for (std::size_t index = 0; index < copies.size(); ++index) {
    const CopyRequest& request = copies[index];
    Device& source = request.src_stream->device();
    Device& target = request.dst_stream->device();
    if (&source == &target || !source.peer_access(target)) {
      copy(*request.src_stream, request.src, request.src_offset, *request.dst_stream, request.dst, request.dst_offset,
           request.bytes);
      copied[index] = request.dst_stream->record();
      continue;
    }
    check_span(source, request.src, request.src_offset, request.bytes, "source");
    check_span(target, request.dst, request.dst_offset, request.bytes, "destination");
    if (request.bytes == 0) continue;
    request.dst_stream->wait(ready[index]);  // the source's bytes are ready
    target.enqueue_peer(*request.dst_stream, request.src, request.src_offset, request.dst, request.dst_offset,
                        request.bytes);
    copied[index] = request.dst_stream->record();
    peer[index] = true;
  }
  for (std::size_t index = 0; index < copies.size(); ++index) {
    if (peer[index]) copies[index].src_stream->wait(copied[index]);  // later work may overwrite the bytes
  }
  return copied;
}

}  // namespace tp::device

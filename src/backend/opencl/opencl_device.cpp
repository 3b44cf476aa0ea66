// SPDX-License-Identifier: Apache-2.0
#include "backend/opencl/opencl_device.hpp"

#include <optional>
#include <utility>

#include "backend/opencl/opencl_kernel_table.hpp"
#include "backend/opencl/opencl_stream.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/device/backends.hpp"

namespace tp::backend::opencl {
namespace {

cl_command_queue create_queue(const OpenClContext& context) {
  cl_int status = CL_SUCCESS;
  cl_command_queue queue = clCreateCommandQueueWithProperties(context.context(), context.device(), nullptr, &status);
  check(status, "clCreateCommandQueueWithProperties(" + context.properties().name + ")");
  return queue;
}

cl_mem create_status_word(const OpenClContext& context) {
  cl_int status = CL_SUCCESS;
  cl_mem word = clCreateBuffer(context.context(), CL_MEM_READ_WRITE, sizeof(cl_uint), nullptr, &status);
  check(status, "clCreateBuffer(status word, " + context.properties().name + ")");
  return word;
}

// What a launch sees: stream `index` of `device`.
class StreamLaunchContext final : public LaunchContext {
 public:
  StreamLaunchContext(OpenClDevice& device, std::size_t index) : device_(device), index_(index) {}

  cl_command_queue queue() const noexcept override { return device_.queue(index_); }
  cl_context context() const noexcept override { return device_.context().context(); }
  cl_kernel kernel(std::string_view program, std::string_view name) override {
    return device_.kernel(index_, program, name);
  }
  DeviceSpan span(const Tensor& tensor) const override {
    if (tensor.buffer() == nullptr) return {};
    return device_.span(*tensor.buffer(), tensor.offset_bytes(), tensor.nbytes());
  }
  bool has_fp64() const noexcept override { return device_.context().properties().fp64; }
  DeviceSpan status_word() const noexcept override { return device_.status_word(index_); }

 private:
  OpenClDevice& device_;
  const std::size_t index_;
};

}  // namespace

OpenClDevice::OpenClDevice(device::DeviceId id, device::DeviceId physical_id, std::size_t capacity_bytes,
                           std::unique_ptr<memory::MemoryStack> memory, OpenClDeviceMemory& source,
                           std::shared_ptr<OpenClContext> context, const device::DeviceOptions& options,
                           std::shared_ptr<memory::MemoryStack> shared, const OpenClDeviceMemory* shared_source)
    : Device(id, physical_id, capacity_bytes, std::move(memory), options),
      context_(std::move(context)),
      source_(source),
      shared_source_(shared_source),
      staging_buffers_(std::make_shared<StagingBufferTable>()),
      staging_(device::StagingPool::create(id.str(), "CL_MEM_ALLOC_HOST_PTR",
                                           [&] {
                                             return std::make_unique<OpenClStagingMemory>(
                                                 context_, id.str() + "/staging/alloc_host_ptr", staging_buffers_);
                                           })),
      kernels_(options.num_streams) {
  try {
    for (std::size_t index = 0; index < options.num_streams; ++index) {
      queues_.push_back(create_queue(*context_));
      status_words_.push_back(create_status_word(*context_));
    }
    service_queue_ = create_queue(*context_);
  } catch (...) {
    for (cl_command_queue queue : queues_) clReleaseCommandQueue(queue);
    for (cl_mem word : status_words_) clReleaseMemObject(word);
    throw;
  }
  if (shared != nullptr) set_shared_memory(std::move(shared), "fine-grained buffer SVM");
  std::vector<std::unique_ptr<device::Stream>> streams;
  for (std::size_t index = 0; index < options.num_streams; ++index) {
    streams.push_back(std::make_unique<OpenClStream>(*this, index, context_->context(), queues_[index]));
  }
  set_streams(std::move(streams));
}

OpenClDevice::~OpenClDevice() {
  shut_down();
  for (auto& kernels : kernels_) {
    for (const auto& [name, kernel] : kernels) clReleaseKernel(kernel);
  }
  for (cl_command_queue queue : queues_) clReleaseCommandQueue(queue);
  for (cl_mem word : status_words_) clReleaseMemObject(word);
  clReleaseCommandQueue(service_queue_);
}

DeviceSpan OpenClDevice::span(const Buffer& buffer, std::size_t offset, std::size_t bytes) const {
  const auto* owner = dynamic_cast<const OpenClDevice*>(&buffer.device());
  if (owner == nullptr || &owner->context() != context_.get()) {
    TP_THROW(DeviceError, "opencl", name(), " cannot reach memory of ", buffer.device().name(), " (",
             buffer.tag().describe(),
             "): only buffers of opencl devices on the same OpenCL device share a"
             " context; copy the tensor to ",
             name(), " first");
  }
  const char* const address = static_cast<const char*>(unchecked_address(buffer));
  if (address == nullptr) return {};
  return owner->find(address + offset, bytes);
}

DeviceSpan OpenClDevice::find(const void* ptr, std::size_t bytes) const {
  if (shared_source_ != nullptr) {
    if (const std::optional<DeviceSpan> span = shared_source_->lookup(ptr, bytes)) return *span;
  }
  return source_.find(ptr, bytes);
}

cl_kernel OpenClDevice::kernel(std::size_t index, std::string_view program, std::string_view name) {
  auto& kernels = kernels_.at(index);
  std::string key = std::string(program) + "/" + std::string(name);
  const auto found = kernels.find(key);
  if (found != kernels.end()) return found->second;
  cl_program built = context_->program(program);
  const std::string kernel_name(name);
  cl_int status = CL_SUCCESS;
  cl_kernel kernel = clCreateKernel(built, kernel_name.c_str(), &status);
  check(status, "clCreateKernel(" + key + ")");
  kernels.emplace(std::move(key), kernel);
  return kernel;
}

void OpenClDevice::launch(device::Stream& stream, Launch launch) {
  if (&stream.device() != this) {
    TP_THROW(InvalidArgument, "opencl", "enqueue: stream ", stream.name(), " does not belong to ", name());
  }
  if (!launch) TP_THROW(InvalidArgument, "opencl", "enqueue on ", stream.name(), ": the launch is empty");
  // No wait: the stream's marker behind the commands keeps `launch` (its captures) until they have run.
  opencl_stream(stream).enqueue_commands([this, index = stream.index(), launch = std::move(launch)] {
    StreamLaunchContext context(*this, index);
    launch(context);
  });
}

OpenClStream& OpenClDevice::opencl_stream(device::Stream& stream) {
  // Every stream of an OpenClDevice is an OpenClStream (the constructor makes them).
  return static_cast<OpenClStream&>(stream);
}

void OpenClDevice::enqueue_to_host(device::Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                                   void* host, std::size_t bytes) {
  // Non-blocking: `host` stays valid until the stream's marker behind the read (the caller's contract).
  opencl_stream(stream).enqueue_commands([this, index = stream.index(), src, src_offset, host, bytes] {
    const DeviceSpan from = span(*src, src_offset, bytes);
    check(clEnqueueReadBuffer(queues_[index], from.buffer, CL_FALSE, from.offset, bytes, host, 0, nullptr, nullptr),
          "clEnqueueReadBuffer");
  });
}

void OpenClDevice::enqueue_from_host(device::Stream& stream, const void* host, const std::shared_ptr<Buffer>& dst,
                                     std::size_t dst_offset, std::size_t bytes, std::shared_ptr<void> host_owner) {
  // Non-blocking: `owner` (the staging block) is a capture, kept until the write has run.
  opencl_stream(stream).enqueue_commands(
      [this, index = stream.index(), host, dst, dst_offset, bytes, owner = std::move(host_owner)] {
        const DeviceSpan to = span(*dst, dst_offset, bytes);
        check(clEnqueueWriteBuffer(queues_[index], to.buffer, CL_FALSE, to.offset, bytes, host, 0, nullptr, nullptr),
              "clEnqueueWriteBuffer");
      });
}

void OpenClDevice::enqueue_within(device::Stream& stream, const std::shared_ptr<Buffer>& src, std::size_t src_offset,
                                  const std::shared_ptr<Buffer>& dst, std::size_t dst_offset, std::size_t bytes) {
  // Distinct buffers never share bytes, so only a copy within one buffer can overlap. clEnqueueCopyBuffer
  // refuses overlapping ranges (CL_MEM_COPY_OVERLAP): such a copy goes through host staging, taken here so
  // that the task holds it (a capture) until the read and the write behind it have run.
  copies_within_.fetch_add(1, std::memory_order_relaxed);
  const bool overlap = src == dst && src_offset < dst_offset + bytes && dst_offset < src_offset + bytes;
  std::shared_ptr<void> staged = overlap ? staging_->acquire(bytes) : nullptr;
  opencl_stream(stream).enqueue_commands([this, index = stream.index(), src, src_offset, dst, dst_offset, bytes,
                                          staged = std::move(staged)] {
    const DeviceSpan from = span(*src, src_offset, bytes);
    const DeviceSpan to = span(*dst, dst_offset, bytes);
    cl_command_queue queue = queues_[index];
    if (staged != nullptr) {  // the in-order queue runs the write after the read
      check(clEnqueueReadBuffer(queue, from.buffer, CL_FALSE, from.offset, bytes, staged.get(), 0, nullptr, nullptr),
            "clEnqueueReadBuffer");
      check(clEnqueueWriteBuffer(queue, to.buffer, CL_FALSE, to.offset, bytes, staged.get(), 0, nullptr, nullptr),
            "clEnqueueWriteBuffer");
      return;
    }
    check(clEnqueueCopyBuffer(queue, from.buffer, to.buffer, from.offset, to.offset, bytes, 0, nullptr, nullptr),
          "clEnqueueCopyBuffer");
  });
}

void OpenClDevice::poison(void* ptr, std::size_t bytes) noexcept {
  try {
    const DeviceSpan target = find(ptr, bytes);
    const unsigned char pattern = device::kPoisonByte;
    check(clEnqueueFillBuffer(service_queue_, target.buffer, &pattern, 1, target.offset, bytes, 0, nullptr, nullptr),
          "clEnqueueFillBuffer");
    check(clFinish(service_queue_), "clFinish (after the poison fill)");
  } catch (const std::exception& error) {
    TP_LOG(warning, "opencl", name(), ": poisoning a freed buffer failed: ", error.what());
  }
}

void enqueue(device::Stream& stream, Launch launch) {
  auto* device = dynamic_cast<OpenClDevice*>(&stream.device());
  if (device == nullptr) {
    TP_THROW(InvalidArgument, "opencl", "enqueue: stream ", stream.name(), " is not on an opencl device");
  }
  device->launch(stream, std::move(launch));
}

}  // namespace tp::backend::opencl

namespace tp::device {

std::unique_ptr<Device> make_opencl_device(DeviceId id, DeviceId physical_id, std::size_t capacity_bytes,
                                           const memory::MemoryConfig& config, const DeviceOptions& options) {
  if (config.allocator == memory::AllocatorKind::expandable) {
    TP_THROW(InvalidArgument, "opencl", id.str(),
             ": MemoryConfig::allocator = expandable is not available on"
             " opencl devices: OpenCL cannot map physical pages into a reserved address range; use allocator = bfc"
             " or system for ",
             id.str(),
             " (TP_ALLOCATOR=expandable alone leaves opencl devices on their configured"
             " allocator)");
  }
  ops::kernels::register_kernels(DeviceKind::opencl, backend::opencl::opencl_kernel_table());
  auto context = backend::opencl::OpenClContext::acquire(physical_id.index);
  const auto kind = context->properties().svm_coarse_grain_buffer ? backend::opencl::RegionKind::svm
                                                                  : backend::opencl::RegionKind::reserved;
  auto source = std::make_unique<backend::opencl::OpenClDeviceMemory>(context, capacity_bytes, kind, config.device);
  backend::opencl::OpenClDeviceMemory& source_ref = *source;
  auto memory = memory::make_memory_stack(config, std::move(source), nullptr, capacity_bytes);
  // Shared memory: its own stack over fine-grained SVM, grown on demand (nothing is taken until a shared
  // allocation asks), with a wall of the device's capacity of its own, so its bytes never count against the
  // device memory's budget or the step plans made for it.
  std::shared_ptr<memory::MemoryStack> shared;
  const backend::opencl::OpenClDeviceMemory* shared_source = nullptr;
  if (context->properties().svm_fine_grain_buffer) {
    memory::MemoryConfig shared_config;
    shared_config.device = id.str() + "/shared";
    shared_config.policy = memory::GrowthPolicy::grow;
    shared_config.limit_bytes = capacity_bytes;
    shared_config.allocator = memory::AllocatorKind::bfc;
    shared_config.tracking = config.tracking;
    auto shared_memory = std::make_unique<backend::opencl::OpenClDeviceMemory>(
        context, capacity_bytes, backend::opencl::RegionKind::shared, shared_config.device);
    shared_source = shared_memory.get();
    shared = memory::make_memory_stack(shared_config, std::move(shared_memory), nullptr, capacity_bytes);
  }
  return std::make_unique<backend::opencl::OpenClDevice>(id, physical_id, capacity_bytes, std::move(memory), source_ref,
                                                         std::move(context), options, std::move(shared), shared_source);
}

}  // namespace tp::device

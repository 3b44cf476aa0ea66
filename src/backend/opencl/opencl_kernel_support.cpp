// SPDX-License-Identifier: Apache-2.0
#include "backend/opencl/opencl_kernel_support.hpp"

#include <algorithm>

#include "tensorpool/core/error.hpp"

namespace tp::backend::opencl::kernels {

namespace {

// Large enough to fill a GPU's wavefronts several times over, small enough for every full-profile device.
constexpr std::size_t kMaxWorkGroup = 256;

}  // namespace

std::string_view dtype_suffix(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "unknown";
}

std::string kernel_name(std::string_view base, DType dtype) {
  std::string name(base);
  name += '_';
  name += dtype_suffix(dtype);
  return name;
}

void require_fp64(const LaunchContext& context, std::string_view op, DType dtype) {
  if (dtype == DType::f64 && !context.has_fp64()) {
    TP_THROW(DeviceError, kComponent, op, ": this OpenCL device has no float64 support (cl_khr_fp64); use float32");
  }
}

KernelArguments& KernelArguments::span(const DeviceSpan& span) {
  value(span.buffer);
  return value(static_cast<cl_ulong>(span.offset));
}

KernelArguments& KernelArguments::local(std::size_t bytes) {
  set(bytes, nullptr);
  return *this;
}

void KernelArguments::set(std::size_t bytes, const void* argument) {
  check(clSetKernelArg(kernel_, index_, bytes, argument), "clSetKernelArg");
  ++index_;
}

std::size_t work_group_size(LaunchContext& context, cl_kernel kernel) {
  cl_device_id device = nullptr;
  // NOLINTNEXTLINE(bugprone-sizeof-expression): cl_device_id is an opaque handle; its own size is asked for
  check(clGetCommandQueueInfo(context.queue(), CL_QUEUE_DEVICE, sizeof(device), &device, nullptr),
        "clGetCommandQueueInfo(CL_QUEUE_DEVICE)");
  std::size_t allowed = 0;
  check(clGetKernelWorkGroupInfo(kernel, device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(allowed), &allowed, nullptr),
        "clGetKernelWorkGroupInfo(CL_KERNEL_WORK_GROUP_SIZE)");
  return std::max<std::size_t>(1, std::min(kMaxWorkGroup, allowed));
}

void launch_items(LaunchContext& context, cl_kernel kernel, std::uint64_t items) {
  if (items == 0) return;
  const std::size_t group = work_group_size(context, kernel);
  launch_groups(context, kernel, group, static_cast<std::size_t>((items + group - 1) / group));
}

void launch_groups(LaunchContext& context, cl_kernel kernel, std::size_t group_size, std::size_t groups) {
  const std::size_t global = group_size * groups;
  check(clEnqueueNDRangeKernel(context.queue(), kernel, 1, nullptr, &global, &group_size, 0, nullptr, nullptr),
        "clEnqueueNDRangeKernel");
}

void fill_bytes(LaunchContext& context, const DeviceSpan& span, const void* pattern, std::size_t pattern_bytes,
                std::size_t bytes) {
  if (bytes == 0) return;
  check(clEnqueueFillBuffer(context.queue(), span.buffer, pattern, pattern_bytes, span.offset, bytes, 0, nullptr,
                            nullptr),
        "clEnqueueFillBuffer");
}

void copy_bytes(LaunchContext& context, const DeviceSpan& source, const DeviceSpan& target, std::size_t bytes) {
  if (bytes == 0) return;
  check(clEnqueueCopyBuffer(context.queue(), source.buffer, target.buffer, source.offset, target.offset, bytes, 0,
                            nullptr, nullptr),
        "clEnqueueCopyBuffer");
}

}  // namespace tp::backend::opencl::kernels

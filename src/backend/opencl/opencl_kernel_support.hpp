// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the OpenCL kernel launchers (opencl_kernels_*.cpp) share: kernel names by dtype, argument setting, the
// float64 requirement, and 1-D launches. Every function here runs inside a launch (opencl_launch.hpp), on the
// thread that enqueues the stream's commands.

#include <CL/cl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "backend/opencl/opencl_launch.hpp"
#include "tensorpool/core/dtype.hpp"

namespace tp::backend::opencl::kernels {

inline constexpr std::string_view kComponent = "opencl";

// The suffix of a kernel's name for `dtype`: "f32", "f16", "bf16", "f64", "i32", "i64", "u8", "bool".
std::string_view dtype_suffix(DType dtype) noexcept;

// `base` + "_" + dtype_suffix(dtype): "relu_f16".
[[nodiscard]] std::string kernel_name(std::string_view base, DType dtype);

// Throws tp::DeviceError naming `op` when `dtype` is float64 and the device has no cl_khr_fp64 (its programs
// then have no float64 kernels).
void require_fp64(const LaunchContext& context, std::string_view op, DType dtype);

// Sets a kernel's arguments in declaration order. A tensor is two arguments, (buffer, ulong byte offset): the
// (__global T* base, ulong offset) pair every kernel in kernels/*.cl takes.
class KernelArguments {
 public:
  explicit KernelArguments(cl_kernel kernel) noexcept : kernel_(kernel) {}

  template <typename T>
  KernelArguments& value(const T& argument) {
    // NOLINTNEXTLINE(bugprone-sizeof-expression): T may be a handle (cl_mem), passed by value as OpenCL wants
    set(sizeof(T), &argument);
    return *this;
  }
  KernelArguments& span(const DeviceSpan& span);
  // A __local buffer of `bytes`.
  KernelArguments& local(std::size_t bytes);

 private:
  void set(std::size_t bytes, const void* argument);

  cl_kernel kernel_;
  cl_uint index_ = 0;
};

// The work-group size the launchers use for `kernel` on the queue's device: at most 256, within what the
// device allows for the kernel.
[[nodiscard]] std::size_t work_group_size(LaunchContext& context, cl_kernel kernel);

// Enqueues `kernel` over `items` work-items, rounded up to whole work-groups (each kernel returns for ids past
// its element count). Enqueues nothing for 0 items.
void launch_items(LaunchContext& context, cl_kernel kernel, std::uint64_t items);

// Enqueues `groups` work-groups of `group_size` work-items each.
void launch_groups(LaunchContext& context, cl_kernel kernel, std::size_t group_size, std::size_t groups);

// Sets `bytes` bytes from `span` on to copies of `pattern` (pattern_bytes long; bytes a multiple of it).
void fill_bytes(LaunchContext& context, const DeviceSpan& span, const void* pattern, std::size_t pattern_bytes,
                std::size_t bytes);

// Copies `bytes` from `source` to `target` (distinct, non-overlapping ranges of buffers of the context).
void copy_bytes(LaunchContext& context, const DeviceSpan& source, const DeviceSpan& target, std::size_t bytes);

// Calls body(T{}) with T the C type of a kernel's float scalar arguments for tensors of `dtype`: cl_double for
// f64, cl_float for f32 and for f16 / bf16 (computed in float).
template <typename Body>
void with_scalar_type(DType dtype, Body&& body) {
  if (dtype == DType::f64) {
    body(cl_double{});
  } else {
    body(cl_float{});
  }
}

inline cl_ulong elements(const Tensor& tensor) { return static_cast<cl_ulong>(tensor.num_elements()); }

inline bool same_span(const DeviceSpan& a, const DeviceSpan& b) noexcept {
  return a.buffer == b.buffer && a.offset == b.offset;
}

}  // namespace tp::backend::opencl::kernels

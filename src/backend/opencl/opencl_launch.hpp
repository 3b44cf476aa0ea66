// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the OpenCL kernels (opencl_kernels*.cpp, kernels/*.cl) need from the OpenCL device: the buffer and
// byte offset behind a tensor, the compiled kernels of this device, and a way to put commands on a stream's
// in-order command queue. The device (opencl_device.cpp) implements it.
//
// Invariants: a tensor's memory is reached only through its cl_mem and offset, on the stream's queue; the
// tensors an enqueue() captures stay alive until the commands it enqueued have completed (the stream's marker
// behind them, opencl_stream.hpp), so their memory is not reused under a running kernel (the stream-ordered
// rule of every backend). A launch runs on the stream's worker and must not wait for its own commands, except
// to read a result back (a blocking read of the status word), which waits for the queue up to there.

#include <CL/cl.h>

#include <cstddef>
#include <functional>
#include <string_view>

#include "tensorpool/core/tensor.hpp"
#include "tensorpool/device/stream.hpp"

namespace tp::backend::opencl {

// Throws tp::DeviceError "<call> failed: <CL_ERROR_NAME> (<code>)" unless code == CL_SUCCESS; an
// out-of-memory code (CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES on allocation, CL_OUT_OF_HOST_MEMORY)
// is still a DeviceError here: allocation paths turn it into tp::OutOfMemoryError with the device's report.
void check(cl_int code, std::string_view call);
// True for the codes a driver answers an allocation it cannot serve with (CL_MEM_OBJECT_ALLOCATION_FAILURE,
// CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY, CL_INVALID_BUFFER_SIZE): allocation paths report them as
// tp::OutOfMemoryError.
bool is_out_of_memory(cl_int code) noexcept;
// "CL_INVALID_VALUE" for -30, "CL_UNKNOWN_ERROR" for codes it does not know.
std::string_view error_name(cl_int code) noexcept;

// A tensor's memory on its OpenCL device: the buffer object and the byte offset of the tensor's first
// element in it (Tensor::offset_bytes() included).
struct DeviceSpan {
  cl_mem buffer = nullptr;
  std::size_t offset = 0;
};

// What a launch sees while it enqueues: the stream's queue and the device's compiled kernels.
class LaunchContext {
 public:
  virtual ~LaunchContext() = default;
  virtual cl_command_queue queue() const noexcept = 0;
  virtual cl_context context() const noexcept = 0;
  // The kernel `name` of the embedded program `program` (kernels/<program>.cl), built once per device with
  // the device's options and cached; a build failure throws tp::DeviceError with the build log. The returned
  // kernel is this launch's own to set arguments on (no other thread uses it while the launch runs).
  virtual cl_kernel kernel(std::string_view program, std::string_view name) = 0;
  // `tensor`'s buffer and offset (the tensor lives on this device, or on a device of the same context).
  virtual DeviceSpan span(const Tensor& tensor) const = 0;
  // Whether the device supports double precision (cl_khr_fp64); float64 kernels throw tp::DeviceError
  // naming the op when it does not.
  virtual bool has_fp64() const noexcept = 0;
  // A 4-byte scratch word on the device owned by the stream itself (created with its queue, outside the
  // device's memory stack, like the queue), for a launch's status results (the label check's first bad row).
  // Only the stream's launches use it, one at a time: a launch that writes it reads it back (blocking) before
  // it returns, so no later launch's command overwrites it first; its content is undefined when a launch starts.
  virtual DeviceSpan status_word() const noexcept = 0;
};

// Enqueues on `stream` (a stream of an opencl device) a launch: `launch` runs once, in stream order, on the
// stream's worker, and enqueues commands on context.queue() without waiting for them; enqueue() and the
// launch both return at once, and the stream counts the launch complete (and releases what `launch`
// captured) only once those commands have completed. An exception from `launch` (after which the commands it
// already enqueued still run with its captures alive), or a command that failed on the device, is kept as
// the stream's error (Stream::synchronize rethrows it).
using Launch = std::function<void(LaunchContext& context)>;
void enqueue(device::Stream& stream, Launch launch);

}  // namespace tp::backend::opencl

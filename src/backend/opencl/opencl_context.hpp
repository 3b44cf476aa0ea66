// SPDX-License-Identifier: Apache-2.0
#pragma once
// OpenClContext: one physical OpenCL device in use by this process: its cl_context and its compiled programs.
// The logical devices on that physical device (a split, or TP_OPENCL_DEVICES) share it, so their buffers
// live in one context and each program is built once per physical device.
//
// Invariants: context_ and device_ are immutable and valid for the object's life; a program in programs_ was
// built successfully for device_ and is never rebuilt or released before the destructor. Thread-safe.

#include <CL/cl.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "tensorpool/device/opencl_properties.hpp"

namespace tp::backend::opencl {

// The embedded kernel programs (kernels/<name>.cl), by name; generated at build time.
const std::map<std::string_view, std::string_view>& program_sources();

// Builds `prelude` (kernels/prelude.cl, or empty) followed by `source` for `device` with `options`. A failed
// build throws tp::DeviceError naming the program, the device, the code and the compiler's build log.
[[nodiscard]] cl_program build_program(cl_context context, cl_device_id device, std::string_view name,
                                       std::string_view prelude, std::string_view source, const std::string& options);

class OpenClContext {
 public:
  // The context of physical device `index` (of device::opencl_physical_devices()), created on first use and
  // shared while any holder keeps it. Throws tp::DeviceError when the index does not exist or the driver
  // refuses the context.
  [[nodiscard]] static std::shared_ptr<OpenClContext> acquire(int index);
  ~OpenClContext();
  OpenClContext(const OpenClContext&) = delete;
  OpenClContext& operator=(const OpenClContext&) = delete;

  cl_context context() const noexcept { return context_; }
  cl_device_id device() const noexcept { return device_; }
  int index() const noexcept { return index_; }
  const device::OpenClProperties& properties() const noexcept { return properties_; }
  // The options every program is built with: -cl-std=CL1.2, and -DTP_HAS_FP64=1 when the device has fp64.
  const std::string& build_options() const noexcept { return build_options_; }

  // The embedded program `name`, built on first request (callers wait for a build in progress). Throws
  // tp::DeviceError for an unknown name (listing the known ones) or a failed build (with its log).
  cl_program program(std::string_view name);

 private:
  OpenClContext(int index, cl_device_id device, device::OpenClProperties properties);

  const int index_;
  const cl_device_id device_;
  const device::OpenClProperties properties_;
  const std::string build_options_;
  cl_context context_ = nullptr;
  std::mutex programs_mutex_;  // guards programs_ (held across a build, so each program is built once)
  std::map<std::string, cl_program, std::less<>> programs_;
};

}  // namespace tp::backend::opencl

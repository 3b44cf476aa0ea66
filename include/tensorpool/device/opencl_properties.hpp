// SPDX-License-Identifier: Apache-2.0
#pragma once
// What an OpenCL device reports about itself (clGetDeviceInfo), for `tensorpool devices` and the backend's
// choices (double precision kernels, shared virtual memory).

#include <cstddef>
#include <string>

namespace tp::device {

struct OpenClProperties {
  std::string name;                          // CL_DEVICE_NAME, e.g. "pthread-skylake-avx512"
  std::string vendor;                        // CL_DEVICE_VENDOR
  std::string driver_version;                // CL_DRIVER_VERSION
  std::string device_version;                // CL_DEVICE_VERSION, e.g. "OpenCL 3.0 PoCL ..."
  std::string platform;                      // CL_PLATFORM_NAME
  std::size_t global_memory_bytes = 0;       // CL_DEVICE_GLOBAL_MEM_SIZE
  std::size_t max_allocation_bytes = 0;      // CL_DEVICE_MAX_MEM_ALLOC_SIZE: the largest single buffer
  std::size_t base_address_align_bytes = 0;  // CL_DEVICE_MEM_BASE_ADDR_ALIGN, in bytes
  unsigned compute_units = 0;                // CL_DEVICE_MAX_COMPUTE_UNITS
  // CL_DEVICE_SVM_CAPABILITIES (all false before OpenCL 2.0).
  bool svm_coarse_grain_buffer = false;
  bool svm_fine_grain_buffer = false;
  bool svm_fine_grain_system = false;
  bool fp64 = false;  // cl_khr_fp64 (CL_DEVICE_DOUBLE_FP_CONFIG != 0)
};

}  // namespace tp::device

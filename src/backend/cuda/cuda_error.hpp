// SPDX-License-Identifier: Apache-2.0
#pragma once
// check() and friends: a failed CUDA runtime, driver or cuBLAS call as a typed error naming the call and the
// status (cudaGetErrorName). An allocation refused for lack of memory is reported by the memory sources as
// tp::OutOfMemoryError (is_out_of_memory says which statuses those are); every other failure is a
// tp::DeviceError.

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string_view>

namespace tp::backend::cuda {

// Throws tp::DeviceError "<call> failed: <cudaGetErrorName> (<code>): <cudaGetErrorString>" unless `status` is
// cudaSuccess.
void check(cudaError_t status, std::string_view call);
// The same for a driver API call (cuGetErrorName).
void check(CUresult status, std::string_view call);
// The same for a cuBLAS / cuBLASLt call (cublasLtGetStatusName).
void check(cublasStatus_t status, std::string_view call);

// Whether `status` says the device is out of memory (cudaErrorMemoryAllocation).
[[nodiscard]] bool is_out_of_memory(cudaError_t status) noexcept;
[[nodiscard]] bool is_out_of_memory(CUresult status) noexcept;

// Whether `status` says CUDA's state has gone with the exiting process: the static CUDA runtime has unloaded
// (cudaErrorCudartUnloading) or the driver has been deinitialized (CUDA_ERROR_DEINITIALIZED). Objects that
// outlive the runtime's own exit-time teardown (the DeviceManager singleton's devices, their pools and
// streams, destroyed after it) see every teardown call fail so. Nothing is left to free then (the driver
// releases the process's memory, streams and events with it), so such a failure is neither reported nor
// retried; every other status is reported.
//
// Why a predicate on the status and no "CUDA has unloaded" flag (set by an atexit handler registered after
// the first CUDA call, to skip the calls altogether): a call after the unload is defined to fail at once with
// exactly these statuses, so the status already says what the flag would, at the call, with no ordering of
// exit handlers to get right (a flag set too early would also skip frees that still work, one set by a
// handler registered before the runtime's would come too late) and no state shared between threads.
[[nodiscard]] bool is_shutting_down(cudaError_t status) noexcept;
[[nodiscard]] bool is_shutting_down(CUresult status) noexcept;

// For noexcept teardown and free paths (frees, destroys, restoring the current device), which cannot throw:
// writes "tensorpool: <call> failed: <name> (<code>): <description>" to stderr unless `status` is a success or
// is_shutting_down(status). stderr rather than the log: the log may be gone at exit.
void report_teardown_failure(cudaError_t status, const char* call) noexcept;
void report_teardown_failure(CUresult status, const char* call) noexcept;
void report_teardown_failure(cublasStatus_t status, const char* call) noexcept;

}  // namespace tp::backend::cuda

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

}  // namespace tp::backend::cuda

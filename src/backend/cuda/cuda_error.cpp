// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/cuda_error.hpp"

#include "backend/cuda/cuda_driver.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda {

void check(cudaError_t status, std::string_view call) {
  if (status == cudaSuccess) return;
  TP_THROW(DeviceError, "cuda", call, " failed: ", cudaGetErrorName(status), " (", static_cast<int>(status),
           "): ", cudaGetErrorString(status));
}

void check(CUresult status, std::string_view call) {
  if (status == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  try {
    if (driver_function<decltype(&cuGetErrorName)>("cuGetErrorName")(status, &name) != CUDA_SUCCESS) name = nullptr;
    if (driver_function<decltype(&cuGetErrorString)>("cuGetErrorString")(status, &text) != CUDA_SUCCESS) text = nullptr;
  } catch (const DeviceError&) {  // a driver without the lookup: the code alone still names the failure
  }
  if (name == nullptr) name = "CUDA_ERROR_UNKNOWN";
  if (text == nullptr) text = "no description";
  TP_THROW(DeviceError, "cuda", call, " failed: ", name, " (", static_cast<int>(status), "): ", text);
}

void check(cublasStatus_t status, std::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  TP_THROW(DeviceError, "cuda", call, " failed: ", cublasLtGetStatusName(status), " (", static_cast<int>(status),
           "): ", cublasLtGetStatusString(status));
}

bool is_out_of_memory(cudaError_t status) noexcept { return status == cudaErrorMemoryAllocation; }

bool is_out_of_memory(CUresult status) noexcept { return status == CUDA_ERROR_OUT_OF_MEMORY; }

}  // namespace tp::backend::cuda

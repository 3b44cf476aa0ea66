// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/cuda_error.hpp"

#include "backend/cuda/cublaslt_library.hpp"
#include "backend/cuda/cuda_driver.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"

namespace tp::backend::cuda {

void check(cudaError_t status, std::string_view call) {
  if (status == cudaSuccess) return;
  TP_THROW(DeviceError, "cuda", call, " failed: ", cudaGetErrorName(status), " (", static_cast<int>(status),
           "): ", cudaGetErrorString(status));
}

namespace {

struct DriverStatusWords {
  const char* name = "CUDA_ERROR_UNKNOWN";
  const char* text = "no description";
};

// The driver's name and description of `status` (cuGetErrorName / cuGetErrorString), or placeholders.
DriverStatusWords words_of(CUresult status) noexcept {
  DriverStatusWords words;
  const char* name = nullptr;
  const char* text = nullptr;
  try {
    if (driver_function<decltype(&cuGetErrorName)>("cuGetErrorName")(status, &name) != CUDA_SUCCESS) name = nullptr;
    if (driver_function<decltype(&cuGetErrorString)>("cuGetErrorString")(status, &text) != CUDA_SUCCESS) text = nullptr;
  } catch (...) {  // a driver without the lookup: the code alone still names the failure
  }
  if (name != nullptr) words.name = name;
  if (text != nullptr) words.text = text;
  return words;
}

struct BlasStatusWords {
  const char* name = "CUBLAS_STATUS_UNKNOWN";
  const char* text = "cuBLASLt could not be loaded to describe it";
};

// cuBLASLt's name and description of `status`, or placeholders where the library cannot be loaded.
BlasStatusWords words_of(cublasStatus_t status) noexcept {
  BlasStatusWords words;
  try {
    const cublaslt::Library& library = cublaslt::library();
    if (const char* name = library.GetStatusName(status); name != nullptr) words.name = name;
    if (const char* text = library.GetStatusString(status); text != nullptr) words.text = text;
  } catch (...) {  // no cuBLASLt: the code alone still names the failure
  }
  return words;
}

}  // namespace

void check(CUresult status, std::string_view call) {
  if (status == CUDA_SUCCESS) return;
  const DriverStatusWords words = words_of(status);
  TP_THROW(DeviceError, "cuda", call, " failed: ", words.name, " (", static_cast<int>(status), "): ", words.text);
}

void check(cublasStatus_t status, std::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const BlasStatusWords words = words_of(status);
  TP_THROW(DeviceError, "cuda", call, " failed: ", words.name, " (", static_cast<int>(status), "): ", words.text);
}

bool is_out_of_memory(cudaError_t status) noexcept { return status == cudaErrorMemoryAllocation; }

bool is_out_of_memory(CUresult status) noexcept { return status == CUDA_ERROR_OUT_OF_MEMORY; }

bool is_shutting_down(cudaError_t status) noexcept { return status == cudaErrorCudartUnloading; }

bool is_shutting_down(CUresult status) noexcept { return status == CUDA_ERROR_DEINITIALIZED; }

void report_teardown_failure(cudaError_t status, const char* call) noexcept {
  if (status == cudaSuccess || is_shutting_down(status)) return;
  TP_LOG(error, "cuda", call, " failed: ", cudaGetErrorName(status), " (", static_cast<int>(status),
         "): ", cudaGetErrorString(status));
}

void report_teardown_failure(CUresult status, const char* call) noexcept {
  if (status == CUDA_SUCCESS || is_shutting_down(status)) return;
  const DriverStatusWords words = words_of(status);
  TP_LOG(error, "cuda", call, " failed: ", words.name, " (", static_cast<int>(status), "): ", words.text);
}

void report_teardown_failure(cublasStatus_t status, const char* call) noexcept {
  if (status == CUBLAS_STATUS_SUCCESS) return;  // cuBLASLt has no status of its own for an exiting process
  const BlasStatusWords words = words_of(status);
  TP_LOG(error, "cuda", call, " failed: ", words.name, " (", static_cast<int>(status), "): ", words.text);
}

}  // namespace tp::backend::cuda

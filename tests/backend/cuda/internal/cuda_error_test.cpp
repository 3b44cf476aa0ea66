// SPDX-License-Identifier: Apache-2.0
// cuda_error.hpp's teardown rules, on the statuses alone (no GPU needed): only the statuses of an exiting
// process (the runtime unloaded, the driver deinitialized) count as "shutting down", and a teardown failure is
// written to stderr unless it is one of those. Built only with the CUDA backend.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/cuda_error.hpp"

namespace tp::backend::cuda {
namespace {

TEST(CudaTeardown, OnlyAnUnloadedRuntimeOrADeinitializedDriverIsShuttingDown) {
  EXPECT_TRUE(is_shutting_down(cudaErrorCudartUnloading));
  EXPECT_TRUE(is_shutting_down(CUDA_ERROR_DEINITIALIZED));
  for (const cudaError_t status :
       {cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation, cudaErrorInitializationError, cudaErrorNoDevice,
        cudaErrorInsufficientDriver, cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorContextIsDestroyed,
        cudaErrorInvalidResourceHandle, cudaErrorUnknown}) {
    EXPECT_FALSE(is_shutting_down(status)) << cudaGetErrorName(status);
  }
  for (const CUresult status : {CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY,
                                CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NO_DEVICE, CUDA_ERROR_INVALID_CONTEXT,
                                CUDA_ERROR_CONTEXT_IS_DESTROYED, CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_UNKNOWN}) {
    EXPECT_FALSE(is_shutting_down(status)) << static_cast<int>(status);
  }
}

// What report_teardown_failure writes to stderr for `report`.
template <typename Report>
std::string stderr_of(Report report) {
  ::testing::internal::CaptureStderr();
  report();
  return ::testing::internal::GetCapturedStderr();
}

TEST(CudaTeardown, AFailedTeardownCallIsReportedUnlessTheProcessIsExiting) {
  EXPECT_EQ(stderr_of([] { report_teardown_failure(cudaSuccess, "cudaFree"); }), "");
  EXPECT_EQ(stderr_of([] { report_teardown_failure(cudaErrorCudartUnloading, "cudaFreeHost"); }), "");
  EXPECT_EQ(stderr_of([] { report_teardown_failure(CUDA_SUCCESS, "cuMemUnmap"); }), "");
  EXPECT_EQ(stderr_of([] { report_teardown_failure(CUDA_ERROR_DEINITIALIZED, "cuMemUnmap"); }), "");
  EXPECT_EQ(stderr_of([] { report_teardown_failure(CUBLAS_STATUS_SUCCESS, "cublasLtMatmulDescDestroy"); }), "");

  const std::string runtime = stderr_of([] { report_teardown_failure(cudaErrorInvalidValue, "cudaFree"); });
  EXPECT_NE(runtime.find("cudaFree failed: cudaErrorInvalidValue (1)"), std::string::npos) << runtime;
  // The driver's name of the status where a driver answers; its code everywhere.
  const std::string driver = stderr_of([] { report_teardown_failure(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap"); });
  EXPECT_NE(driver.find("cuMemUnmap failed: "), std::string::npos) << driver;
  EXPECT_NE(driver.find(" (1): "), std::string::npos) << driver;
  const std::string blas =
      stderr_of([] { report_teardown_failure(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescDestroy"); });
  EXPECT_NE(blas.find("cublasLtMatmulDescDestroy failed: CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << blas;
}

}  // namespace
}  // namespace tp::backend::cuda

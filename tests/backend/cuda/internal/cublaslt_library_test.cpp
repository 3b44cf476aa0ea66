// SPDX-License-Identifier: Apache-2.0
// cublaslt_library.hpp without a GPU: a cuBLASLt that cannot be loaded is a tp::DeviceError naming what was tried
// and the fix, and a cuBLAS status still reads as its code then; the toolkit's cuBLASLt loads and names its
// statuses. Built only with the CUDA backend (whose toolkit has the library).
#include "backend/cuda/cublaslt_library.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "backend/cuda/cuda_error.hpp"
#include "backend/cuda/cuda_test_support.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda {
namespace {

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

TEST(CublasLtLoading, AMissingLibraryIsADeviceErrorNamingItAndTheFixAndAStatusStillReadsAsItsCode) {
  const std::string missing = "/nonexistent/tensorpool-test/libcublasLt-missing.so";
  const testing::EnvironmentScope scope("TP_CUBLASLT_LIBRARY", missing);
  EXPECT_EQ(cublaslt::library_names(), missing);
  try {
    static_cast<void>(cublaslt::library());
    FAIL() << "a missing cuBLASLt was loaded";
  } catch (const DeviceError& error) {
    EXPECT_TRUE(contains(error.what(), "cannot load cuBLASLt (" + missing + ")"));
    EXPECT_TRUE(contains(error.what(), "TP_CUBLASLT_LIBRARY"));
  }
  try {
    check(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul");
    FAIL() << "a failed status passed";
  } catch (const DeviceError& error) {
    EXPECT_TRUE(contains(error.what(), "cublasLtMatmul failed: CUBLAS_STATUS_UNKNOWN (7)"));
  }
}

TEST(CublasLtLoading, TheToolkitsLibraryLoadsAfterAFailedLoadAndNamesItsStatuses) {
  {
    const testing::EnvironmentScope scope("TP_CUBLASLT_LIBRARY", "/nonexistent/tensorpool-test/libcublasLt-missing.so");
    EXPECT_THROW(static_cast<void>(cublaslt::library()), DeviceError);
  }
  if (std::getenv("TP_CUBLASLT_LIBRARY") == nullptr) {  // NOLINT(concurrency-mt-unsafe): read-only use
    EXPECT_TRUE(contains(cublaslt::library_names(), "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)));
  }
  const cublaslt::Library& library = cublaslt::library();
  EXPECT_FALSE(library.path.empty());
  try {
    check(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul");
    FAIL() << "a failed status passed";
  } catch (const DeviceError& error) {
    EXPECT_TRUE(contains(error.what(), "cublasLtMatmul failed: CUBLAS_STATUS_INVALID_VALUE (7)"));
  }
}

}  // namespace
}  // namespace tp::backend::cuda

// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/cuda_driver.hpp"

#include <cuda_runtime_api.h>

#include "tensorpool/core/error.hpp"

namespace tp::backend::cuda {

void* driver_symbol(const char* symbol) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t status =
      cudaGetDriverEntryPointByVersion(symbol, &function, CUDA_VERSION, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || function == nullptr) {
    TP_THROW(DeviceError, "cuda", "the CUDA driver has no ", symbol, " for CUDA ", CUDA_VERSION / 1000, ".",
             (CUDA_VERSION % 1000) / 10, " (", cudaGetErrorName(status),
             found == cudaDriverEntryPointVersionNotSufficent ? ": driver too old" : "",
             "); install an NVIDIA driver that supports this CUDA version");
  }
  return function;
}

}  // namespace tp::backend::cuda

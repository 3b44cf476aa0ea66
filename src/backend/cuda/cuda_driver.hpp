// SPDX-License-Identifier: Apache-2.0
#pragma once
// Driver API functions (cuMemCreate, cuMemMap, ...), looked up through the CUDA runtime
// (cudaGetDriverEntryPointByVersion) rather than linked: the library links no libcuda, so it loads on a machine
// without the NVIDIA driver, where the runtime reports no device.

#include <cuda.h>

namespace tp::backend::cuda {

// The driver's `symbol` (e.g. "cuMemCreate") in the ABI of CUDA_VERSION, the toolkit this was built with.
// Throws tp::DeviceError naming the symbol when the driver has none (too old, or no driver).
void* driver_symbol(const char* symbol);

// driver_symbol as the function's type: driver_function<decltype(&cuMemCreate)>("cuMemCreate").
template <typename Function>
Function driver_function(const char* symbol) {
  return reinterpret_cast<Function>(driver_symbol(symbol));
}

}  // namespace tp::backend::cuda

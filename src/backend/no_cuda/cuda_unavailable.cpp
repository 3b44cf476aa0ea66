// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's entry points in a build without it (TP_WITH_CUDA=OFF, or the CUDA toolkit not found at
// configure time): no cuda devices, and a reason that says how to get them.
#include <string>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/backends.hpp"

namespace tp::device {

namespace {
constexpr const char* kReason =
    "this build has no CUDA backend (TP_WITH_CUDA=OFF, or the CUDA toolkit with nvcc, cudart and cuBLASLt was not "
    "found at configure time); install the CUDA toolkit under /usr/local/cuda and reconfigure with TP_WITH_CUDA=ON";
}  // namespace

const std::vector<CudaProperties>& cuda_physical_devices() {
  static const std::vector<CudaProperties> none;
  return none;
}

std::string cuda_unavailable_reason() { return kReason; }

std::size_t cuda_free_bytes(int ordinal) {
  TP_THROW(DeviceError, "cuda", "cannot read the free memory of CUDA device ", ordinal, ": ", kReason);
}

std::unique_ptr<Device> make_cuda_device(DeviceId id, DeviceId, std::size_t, const memory::MemoryConfig&,
                                         const DeviceOptions&) {
  TP_THROW(DeviceError, "cuda", "cannot create ", id.str(), ": ", kReason);
}

std::unique_ptr<Device> make_cuda_planning_device(DeviceId id, std::size_t, const memory::MemoryConfig&,
                                                  const DeviceOptions&, std::string) {
  TP_THROW(DeviceError, "cuda", "cannot plan for ", id.str(), ": ", kReason);
}

}  // namespace tp::device

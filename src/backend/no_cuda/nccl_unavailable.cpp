// SPDX-License-Identifier: Apache-2.0
// tensorpool/distribute/nccl.hpp in a build without the CUDA backend: NCCL serves cuda devices only.
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/backends.hpp"
#include "tensorpool/distribute/nccl.hpp"

namespace tp::distribute {

std::unique_ptr<Communicator> make_nccl_communicator() {
  TP_THROW(DeviceError, "nccl", "the nccl all-reduce needs the CUDA backend: ", device::cuda_unavailable_reason());
}

std::string nccl_version() {
  TP_THROW(DeviceError, "nccl", "NCCL needs the CUDA backend: ", device::cuda_unavailable_reason());
}

}  // namespace tp::distribute

// SPDX-License-Identifier: Apache-2.0
// tensorpool/device/cuda_graphs.hpp in a build without the CUDA backend: no device can capture graphs.
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/cuda_graphs.hpp"

namespace tp::device {

void set_cuda_graph_capture(Device& device, bool on) {
  if (!on) return;  // off is what every device of this build already does
  if (device.kind() != DeviceKind::cuda) {
    TP_THROW(InvalidArgument, "cuda", "CUDA graphs were asked for on ", device.name(), ", which is a ",
             to_string(device.kind()), " device; they exist only on cuda devices: turn them off for it");
  }
  TP_THROW(DeviceError, "cuda", "CUDA graphs were asked for on ", device.name(),
           ", but this build has no CUDA backend; reconfigure with TP_WITH_CUDA=ON, or turn them off");
}

}  // namespace tp::device

// SPDX-License-Identifier: Apache-2.0
// tensorpool/device/cuda_graphs.hpp over the CUDA streams' graph capture (cuda_stream_graphs.cpp).
#include "tensorpool/device/cuda_graphs.hpp"

#include "backend/cuda/cuda_stream.hpp"
#include "tensorpool/core/error.hpp"

namespace tp::device {

void set_cuda_graph_capture(Device& device, bool on) {
  if (device.kind() != DeviceKind::cuda) {
    if (!on) return;  // off is what a non-cuda device always does
    TP_THROW(InvalidArgument, "cuda", "CUDA graphs were asked for on ", device.name(), ", which is a ",
             to_string(device.kind()), " device; they exist only on cuda devices: turn them off for it");
  }
  for (std::size_t index = 0; index < device.num_streams(); ++index) {
    auto* stream = dynamic_cast<backend::cuda::CudaStream*>(&device.stream(index));
    if (stream != nullptr) stream->set_graph_capture(on);  // none on a planning-only device: it runs nothing
  }
}

}  // namespace tp::device

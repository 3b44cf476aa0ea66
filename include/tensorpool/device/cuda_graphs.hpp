// SPDX-License-Identifier: Apache-2.0
#pragma once
// CUDA graph capture of a cuda device's streams (docs/cuda.md, "CUDA graphs"): each stream captures its runs of
// consecutive command tasks into a CUDA graph and launches the graph once, instead of launching every kernel and
// copy as it comes. The results are the same as without (a graph is captured afresh from each segment's calls;
// a segment CUDA refuses to capture runs eagerly).

#include "tensorpool/device/device.hpp"

namespace tp::device {

// Turns capture on or off for every stream of `device`, from each stream's next segment on. Turning it on
// throws tp::InvalidArgument naming the device when it is not a cuda device (graphs are CUDA's; a cpu, sim or
// opencl device has none; off is accepted there, as it changes nothing), and tp::DeviceError in a build
// without the CUDA backend. A planning-only cuda device (`tensorpool estimate` without a GPU) runs nothing:
// accepted, nothing to do.
void set_cuda_graph_capture(Device& device, bool on);

}  // namespace tp::device

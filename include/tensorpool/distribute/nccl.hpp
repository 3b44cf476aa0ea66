// SPDX-License-Identifier: Apache-2.0
#pragma once
// Collectives through NVIDIA's NCCL between cuda devices on distinct GPUs ("nccl" in make_communicator),
// implemented by the CUDA backend (src/backend/cuda/nccl_*.cpp; a build without it throws tp::DeviceError
// saying so). NCCL is loaded at run time (TP_NCCL_LIBRARY, else libnccl.so.2): a binary runs where NCCL is
// missing, and only a collective that needs it fails, with a tp::DeviceError naming the library and the fix.
//
// Scope: in one process (no launcher, or a launcher world of one), the participants are the tensors passed in,
// one communicator per GPU from ncclCommInitAll. Under mpirun with several processes (the multi-worker
// strategy), every worker's tensors: rank 0's ncclGetUniqueId is broadcast over the MPI world and each local
// device joins with ncclCommInitRank as participant rank x local + index (every worker passes the same number
// of tensors; checked). Chunks (reduce_scatter, all_gather) and the broadcast root count those participants.
//
// Each collective is one NCCL call per participant (ncclGroupStart/End around them) on the participant's
// device stream 0, in that stream's order; the communicators are made on first use for a set of GPUs and kept
// until the process exits. NCCL refuses two participants on one GPU: logical devices sharing a GPU use the
// in-process "ring" (their peer kernels read each other's memory directly), which is what the strategies
// choose for them (train/strategy.hpp).

#include <memory>
#include <string>

#include "tensorpool/distribute/communicator.hpp"

namespace tp::distribute {

[[nodiscard]] std::unique_ptr<Communicator> make_nccl_communicator();

// The loaded NCCL's version ("2.28.9"), loading it now; tp::DeviceError as above when it cannot be loaded.
[[nodiscard]] std::string nccl_version();

}  // namespace tp::distribute

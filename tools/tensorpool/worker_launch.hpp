// SPDX-License-Identifier: Apache-2.0
#pragma once
// How `tensorpool train` checks the way it was launched: the strategies that span processes (multi_worker, and
// parameter_server with a rank per worker) need mpirun and ranks started with the same flags; the others are
// one process's job and refuse to run as several ranks of one (each would train alone and all would write into
// one --checkpoint-dir).
#include <cstdint>
#include <vector>

#include "model_setup.hpp"
#include "tensorpool/distribute/job_settings.hpp"

namespace tp::cli {

// tp::InvalidArgument when --strategy multi_worker was not started by mpirun (a world of one would train one
// worker without saying so), or --strategy one / mirrored was started as several ranks of an mpirun job.
void check_launch(const ModelArguments& arguments, const train::DistributionStrategy& strategy);

// The model flags that every rank of a multi-process job must share: those that change the graph, the data
// order or the collectives (strategy, batch size, hidden widths, precision, seed, shard, bucket size, the
// number of devices per worker). Paths, thread counts, the allocator and device memory, and the GEMM library
// may differ per machine: they change neither the update every replica applies nor the collectives' order.
std::vector<distribute::JobSetting> shared_model_settings(const ModelArguments& arguments,
                                                          const train::DistributionStrategy& distribution);

// Collective over the job's ranks: tp::InvalidArgument on every rank when `settings` differ from rank 0's,
// naming the rank, the flag and both values.
void require_same_flags(const std::vector<distribute::JobSetting>& settings);

}  // namespace tp::cli

// SPDX-License-Identifier: Apache-2.0
#pragma once
// Multi-process collectives over MPI (Open MPI: Debian libopenmpi-dev, launched with mpirun). A worker is one
// process with its local devices; the MPI communicator composes hierarchically: the worker's devices reduce
// among themselves (in-process ring), one device's result crosses the workers through pinned host staging
// with MPI, and comes back to the other local devices.
//
// Every collective first checks that all ranks reached it: each rank tells every other the collective's
// sequence number and waits at most `timeout` for theirs, so a stalled worker makes the others fail with a
// tp::DeviceError naming the ranks that did not arrive, never a silent hang (a worker that dies outright is
// reported by mpirun, which then stops the job).
//
// Built with MPI when CMake finds it; otherwise every function here throws tp::DeviceError saying so.

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>

#include "tensorpool/distribute/communicator.hpp"

namespace tp::distribute {

struct MpiWorld {
  int rank = 0;
  int size = 1;
};

// True when the library was built with MPI.
[[nodiscard]] bool mpi_built();
// The number of processes a launcher (mpirun: Open MPI's OMPI_COMM_WORLD_SIZE, or PMI_SIZE) says this one is a
// rank of, read from the environment without initialising MPI; std::nullopt when no launcher started it.
// tp::InvalidArgument naming the variable when it is set but not a positive whole number.
[[nodiscard]] std::optional<int> launcher_world_size();
// Initialises MPI once per process (MPI_Init_thread; at least MPI_THREAD_SERIALIZED, collectives are issued
// under one lock) and finalises it at exit. Without mpirun it is a world of one.
const MpiWorld& mpi_world();

struct MpiOptions {
  // How long a rank waits for the others at a collective; TP_COLLECTIVE_TIMEOUT (seconds) overrides it.
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
};
// options.timeout, or TP_COLLECTIVE_TIMEOUT when set (tp::InvalidArgument unless a positive number of seconds).
[[nodiscard]] std::chrono::milliseconds effective_timeout(const MpiOptions& options = {});

// "mpi" in make_communicator: participants are this worker's tensors (one per local device, all on distinct
// devices); the sums run over every worker's. Chunks (reduce_scatter, all_gather) are per worker and need one
// local tensor: rank r owns Communicator::chunk(n, world size, r).
[[nodiscard]] std::unique_ptr<Communicator> make_mpi_communicator(MpiOptions options = {});
// Buckets of at least this many bytes cross the workers (all-reduce, reduce-scatter) in the communicator's
// pipelined ring of point-to-point messages; smaller ones through MPI's own non-blocking collectives (the
// measured crossover: docs/benchmarks.md).
inline constexpr std::size_t kMpiRingMinimumBytes = std::size_t{8} << 20;

// Sums `values` over the ranks in place (host doubles: step losses and counts for reporting).
void mpi_sum(double* values, int count);
// Blocks until every rank arrives (with the timeout, naming the missing ranks).
void mpi_barrier(MpiOptions options = {});
// Every rank's `bytes` host bytes at `local`, in rank order, into `gathered` (bytes x world size): state each
// rank holds a part of, such as the optimizer-state shards of ZeRO across workers that a checkpoint collects.
// Collective: every rank calls it with the same `bytes` (checked; tp::InvalidArgument naming the ranks' sizes).
void mpi_all_gather(const void* local, std::size_t bytes, void* gathered);
// Rank `root`'s `bytes` host bytes at `data` into every rank's `data` (Horovod's broadcast of the initial
// variables). Collective, same `bytes` on every rank (checked); tp::InvalidArgument for a root outside the job.
void mpi_broadcast(void* data, std::size_t bytes, int root);

}  // namespace tp::distribute

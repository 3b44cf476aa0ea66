// SPDX-License-Identifier: Apache-2.0
#pragma once
// The process's MPI state shared by the MPI collectives: one lock around every MPI call (the library needs
// only MPI_THREAD_SERIALIZED), a collective sequence number every rank advances alike, and the arrival check.

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string_view>

namespace tp::distribute::detail {

std::mutex& mpi_mutex();
// The next collective's number (call with mpi_mutex held): ranks that run the same program agree on it.
std::uint64_t next_sequence();
// With mpi_mutex held: tells every other rank that this one reached collective `sequence` and waits until
// all others have said the same, or throws tp::DeviceError at `deadline` naming the ranks that did not
// arrive (or that arrived at another collective: the workers then run different programs).
void arrive(std::uint64_t sequence, std::string_view what, std::chrono::steady_clock::time_point deadline);

// With mpi_mutex held, from every wait loop: answers other ranks' liveness probes, so that a rank that is
// waiting (not stalled) is told apart from one that stopped.
void serve_probes();
// With mpi_mutex held: polls `request` of collective #`sequence` until it completes, answering probes; past
// `deadline` throws tp::DeviceError naming the ranks that stopped answering (and marks MPI broken). MPI
// progresses only inside its calls, so it polls without sleeping (yielding the core) for the first 5 ms, as a
// blocking call would, then every 50 us: a rank that waits long is waiting for a stalled or slow peer.
void wait_for(MPI_Request& request, std::chrono::steady_clock::time_point deadline, std::uint64_t sequence,
              std::string_view what);
// With mpi_mutex held, after a transfer timed out: the ranks that do not answer a probe within `patience`
// (comma-separated), and marks MPI broken so that the process aborts the job at exit instead of
// finalising (MPI_Finalize would wait for the stalled rank forever).
std::string unresponsive_ranks(std::chrono::milliseconds patience);
void mark_broken();

}  // namespace tp::distribute::detail

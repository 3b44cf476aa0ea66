// SPDX-License-Identifier: Apache-2.0
#pragma once
// Point-to-point messages of parameter-server training across the processes of an mpirun job: rank 0 is the
// server, ranks 1..N-1 its workers. A worker sends requests (pull, push of its gradients, done) to rank 0; the
// server answers pulls and pushes with the current version and parameters, when the staleness bound lets that
// worker go on. Payloads are host float32 arrays (every parameter end to end).
//
// Nothing here blocks without a deadline: sends and receives are non-blocking MPI calls polled until they
// complete or the deadline passes, which throws tp::DeviceError naming the peer rank and marks MPI broken
// (the process then aborts the job at exit instead of waiting for the stalled rank in MPI_Finalize).
//
// Built with MPI when CMake finds it; otherwise parameter_server_job() is false for a world of one and every
// other function throws tp::DeviceError saying MPI is missing.

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace tp::distribute {

using Deadline = std::chrono::steady_clock::time_point;

// True when this process is one of several ranks of an mpirun job (Open MPI's OMPI_COMM_WORLD_SIZE, or
// PMI_SIZE, above 1), without initialising MPI otherwise.
bool parameter_server_job();

enum class ParameterRequest : std::int64_t { pull = 1, push = 2, done = 3 };

struct ParameterMessageHeader {
  ParameterRequest request = ParameterRequest::pull;
  std::int64_t worker_step = 0;
  std::int64_t epoch = 0;
  std::int64_t pulled_version = 0;
  std::int64_t examples = 0;
  double loss = 0;
  double correct = 0;
};

struct ParameterMessage {
  int rank = 0;
  ParameterMessageHeader header{};
  std::vector<float> values{};  // push: the gradients
};

// Server: the next request from any worker, or nothing by `deadline`.
std::optional<ParameterMessage> receive_parameter_request(Deadline deadline);
// Server: answers `rank` with the parameters' version and values (by the deadline, else throws naming the rank).
void send_parameters(int rank, std::int64_t version, std::span<const float> values, Deadline deadline);

// Worker: a request to rank 0 (by the deadline).
void send_parameter_request(const ParameterMessageHeader& header, std::span<const float> values, Deadline deadline);
// Worker: rank 0's answer into `values` (resized); returns the version.
std::int64_t receive_parameters(std::vector<float>& values, Deadline deadline);

// Marks MPI broken (see above): call before reporting a peer that stopped answering.
void abandon_parameter_job();

}  // namespace tp::distribute

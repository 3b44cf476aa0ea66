// SPDX-License-Identifier: Apache-2.0
// The MPI transport of parameter-server training (tensorpool/distribute/parameter_transport.hpp). Every MPI call
// is made under mpi_mutex (MPI_THREAD_SERIALIZED) and every wait polls a non-blocking request against its
// deadline, answering liveness probes meanwhile.
#include "tensorpool/distribute/parameter_transport.hpp"

#include <mpi.h>

#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distribute/mpi/mpi_world.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"

namespace tp::distribute {

namespace {

constexpr int kRequestTag = 7101;  // worker -> server: header, then the gradients (push)
constexpr int kReplyTag = 7102;    // server -> worker: version, then the parameters
constexpr int kServerRank = 0;
constexpr auto kPoll = std::chrono::microseconds(100);

// Send buffers of transfers abandoned at their deadline: MPI may still read them, so they are never freed.
void keep_forever(std::vector<std::byte> buffer) {
  static std::vector<std::vector<std::byte>> abandoned;
  abandoned.push_back(std::move(buffer));
}

void check_count(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    TP_THROW(InvalidArgument, "distribute", "parameter server: a message of ", bytes,
             " bytes exceeds MPI's int counts; use a smaller model");
  }
}

// Sends `buffer` to `rank`, polling until it completes or `deadline` passes.
void send_until(std::vector<std::byte> buffer, int rank, int tag, Deadline deadline, std::string_view what) {
  check_count(buffer.size());
  MPI_Request request;
  {
    std::lock_guard lock(detail::mpi_mutex());
    MPI_Isend(buffer.data(), static_cast<int>(buffer.size()), MPI_BYTE, rank, tag, MPI_COMM_WORLD, &request);
  }
  for (;;) {
    {
      std::lock_guard lock(detail::mpi_mutex());
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done != 0) return;
      detail::serve_probes();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      keep_forever(std::move(buffer));
      detail::mark_broken();
      TP_THROW(DeviceError, "distribute", "rank ", mpi_world().rank, ": parameter server ", what, " to rank ", rank,
               " did not complete in time; rank ", rank,
               " stalled or died; TP_COLLECTIVE_TIMEOUT (seconds) sets how long ranks wait");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

// The next message with `tag` from `source` (MPI_ANY_SOURCE: any rank) by `deadline`; its sender in `rank`.
std::optional<std::vector<std::byte>> receive_until(int source, int tag, Deadline deadline, int& rank) {
  for (;;) {
    {
      std::lock_guard lock(detail::mpi_mutex());
      int waiting = 0;
      MPI_Status status;
      MPI_Iprobe(source, tag, MPI_COMM_WORLD, &waiting, &status);
      if (waiting != 0) {
        int bytes = 0;
        MPI_Get_count(&status, MPI_BYTE, &bytes);
        std::vector<std::byte> buffer(static_cast<std::size_t>(bytes));
        MPI_Recv(buffer.data(), bytes, MPI_BYTE, status.MPI_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        rank = status.MPI_SOURCE;
        return buffer;
      }
      detail::serve_probes();
    }
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(kPoll);
  }
}

template <typename Header>
std::vector<std::byte> pack(const Header& header, std::span<const float> values) {
  std::vector<std::byte> buffer(sizeof(Header) + values.size_bytes());
  std::memcpy(buffer.data(), &header, sizeof(Header));
  if (!values.empty()) std::memcpy(buffer.data() + sizeof(Header), values.data(), values.size_bytes());
  return buffer;
}

template <typename Header>
Header unpack(const std::vector<std::byte>& buffer, std::vector<float>& values, int rank) {
  if (buffer.size() < sizeof(Header) || (buffer.size() - sizeof(Header)) % sizeof(float) != 0) {
    TP_THROW(DataError, "distribute", "parameter server: a message of ", buffer.size(), " bytes from rank ", rank,
             " is malformed; every rank must run the same tensorpool build");
  }
  Header header;
  std::memcpy(&header, buffer.data(), sizeof(Header));
  values.resize((buffer.size() - sizeof(Header)) / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), buffer.data() + sizeof(Header), values.size() * sizeof(float));
  return header;
}

}  // namespace

std::optional<ParameterMessage> receive_parameter_request(Deadline deadline) {
  mpi_world();
  int rank = -1;
  std::optional<std::vector<std::byte>> buffer = receive_until(MPI_ANY_SOURCE, kRequestTag, deadline, rank);
  if (!buffer) return std::nullopt;
  ParameterMessage message;
  message.rank = rank;
  message.header = unpack<ParameterMessageHeader>(*buffer, message.values, rank);
  return message;
}

void send_parameters(int rank, std::int64_t version, std::span<const float> values, Deadline deadline) {
  mpi_world();
  send_until(pack(version, values), rank, kReplyTag, deadline, "reply");
}

void send_parameter_request(const ParameterMessageHeader& header, std::span<const float> values, Deadline deadline) {
  mpi_world();
  send_until(pack(header, values), kServerRank, kRequestTag, deadline, "request");
}

std::int64_t receive_parameters(std::vector<float>& values, Deadline deadline) {
  mpi_world();
  int rank = -1;
  std::optional<std::vector<std::byte>> buffer = receive_until(kServerRank, kReplyTag, deadline, rank);
  if (!buffer) {
    detail::mark_broken();
    TP_THROW(DeviceError, "distribute", "rank ", mpi_world().rank,
             ": the parameter server (rank 0) sent no parameters in time; rank 0 stalled or died; "
             "TP_COLLECTIVE_TIMEOUT (seconds) sets how long ranks wait");
  }
  return unpack<std::int64_t>(*buffer, values, rank);
}

void abandon_parameter_job() {
  std::lock_guard lock(detail::mpi_mutex());
  detail::mark_broken();
}

}  // namespace tp::distribute

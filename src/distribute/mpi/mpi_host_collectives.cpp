// SPDX-License-Identifier: Apache-2.0
// The host-side collectives of tensorpool/distribute/mpi.hpp: mpi_all_gather (host bytes from every rank, in
// rank order) and mpi_broadcast (one rank's bytes to every rank). The sizes are compared first, so ranks that
// disagree (different models or flags) get an error naming the sizes instead of a truncated or overrun buffer.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "distribute/mpi/mpi_world.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"

namespace tp::distribute {

namespace {

void check_count(std::string_view what, std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(INT_MAX)) {
    TP_THROW(InvalidArgument, "distribute", what, ": ", bytes,
             " bytes exceed MPI's int counts; send the state in parts");
  }
}

// A host collective in progress: the MPI lock, its number and its deadline. Every transfer is non-blocking and
// polled against the deadline (detail::wait_for), so a rank that stalls midway is named, not waited for forever.
struct Entered {
  std::unique_lock<std::mutex> lock;
  std::uint64_t sequence = 0;
  std::chrono::steady_clock::time_point deadline;
};

// Takes the MPI lock, checks that every rank reached this collective, then (on every rank alike) that all
// pass the same `bytes`.
Entered enter(std::string_view what, std::size_t bytes) {
  Entered entered{std::unique_lock(detail::mpi_mutex()), detail::next_sequence(),
                  std::chrono::steady_clock::now() + effective_timeout({})};
  detail::arrive(entered.sequence, what, entered.deadline);
  const MpiWorld& world = mpi_world();
  const auto size = static_cast<std::uint64_t>(bytes);
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(world.size));
  MPI_Request request;
  MPI_Iallgather(&size, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD, &request);
  detail::wait_for(request, entered.deadline, entered.sequence, what);
  for (std::uint64_t other : sizes) {
    if (other == size) continue;
    std::string list;
    for (std::size_t rank = 0; rank < sizes.size(); ++rank) {
      list +=
          (rank == 0 ? "" : ", ") + std::string("rank ") + std::to_string(rank) + ": " + std::to_string(sizes[rank]);
    }
    TP_THROW(InvalidArgument, "distribute", what, ": the ranks pass different sizes (", list,
             " bytes); every worker must run the same model and flags");
  }
  return entered;
}

}  // namespace

void mpi_all_gather(const void* local, std::size_t bytes, void* gathered) {
  check_count("mpi_all_gather", bytes);
  if (mpi_world().size == 1) {
    if (bytes > 0) std::memcpy(gathered, local, bytes);
    return;
  }
  const Entered entered = enter("mpi_all_gather", bytes);
  MPI_Request request;
  MPI_Iallgather(local, static_cast<int>(bytes), MPI_BYTE, gathered, static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD,
                 &request);
  detail::wait_for(request, entered.deadline, entered.sequence, "mpi_all_gather");
}

void mpi_broadcast(void* data, std::size_t bytes, int root) {
  check_count("mpi_broadcast", bytes);
  const MpiWorld& world = mpi_world();
  if (root < 0 || root >= world.size) {
    TP_THROW(InvalidArgument, "distribute", "mpi_broadcast: root ", root, " is not a rank of this job (0..",
             world.size - 1, ")");
  }
  if (world.size == 1) return;
  const Entered entered = enter("mpi_broadcast", bytes);
  MPI_Request request;
  MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &request);
  detail::wait_for(request, entered.deadline, entered.sequence, "mpi_broadcast");
}

}  // namespace tp::distribute

// mpi_all_gather (tensorpool/distribute/mpi.hpp): host bytes from every rank, in rank order. The sizes are
// gathered first, so ranks that disagree (different models or flags) get an error naming the sizes instead of
// a truncated or overrun buffer.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "distribute/mpi/mpi_world.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"

namespace tp::distribute {

void mpi_all_gather(const void* local, std::size_t bytes, void* gathered) {
  const MpiWorld& world = mpi_world();
  if (bytes > static_cast<std::size_t>(INT_MAX)) {
    TP_THROW(InvalidArgument, "distribute", "mpi_all_gather: ", bytes,
             " bytes exceed MPI's int counts; gather the state in parts");
  }
  if (world.size == 1) {
    if (bytes > 0) std::memcpy(gathered, local, bytes);
    return;
  }
  std::lock_guard lock(detail::mpi_mutex());
  const std::uint64_t sequence = detail::next_sequence();
  detail::arrive(sequence, "all_gather (host)", std::chrono::steady_clock::now() + effective_timeout({}));
  const auto size = static_cast<std::uint64_t>(bytes);
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(world.size));
  MPI_Allgather(&size, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (std::uint64_t other : sizes) {
    if (other == size) continue;
    std::string list;
    for (std::size_t rank = 0; rank < sizes.size(); ++rank) {
      list +=
          (rank == 0 ? "" : ", ") + std::string("rank ") + std::to_string(rank) + ": " + std::to_string(sizes[rank]);
    }
    TP_THROW(InvalidArgument, "distribute", "mpi_all_gather: the ranks contribute different sizes (", list,
             " bytes); every worker must run the same model and flags");
  }
  MPI_Allgather(local, static_cast<int>(bytes), MPI_BYTE, gathered, static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD);
}

}  // namespace tp::distribute

// SPDX-License-Identifier: Apache-2.0
// Built without MPI: the multi-process collectives say what is missing instead of failing obscurely.
#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"

namespace tp::distribute {

namespace {

[[noreturn]] void unavailable() {
  TP_THROW(DeviceError, "distribute",
           "tensorpool was built without MPI; install Open MPI (apt-get install libopenmpi-dev openmpi-bin, or "
           "scripts/install-deps) and rebuild");
}

}  // namespace

bool mpi_built() { return false; }
const MpiWorld& mpi_world() {
  static const MpiWorld alone;
  return alone;
}
std::unique_ptr<Communicator> make_mpi_communicator(MpiOptions) { unavailable(); }
void mpi_sum(double*, int) { unavailable(); }
void mpi_barrier(MpiOptions) { unavailable(); }
void mpi_all_gather(const void*, std::size_t, void*) { unavailable(); }
void mpi_broadcast(void*, std::size_t, int) { unavailable(); }

}  // namespace tp::distribute

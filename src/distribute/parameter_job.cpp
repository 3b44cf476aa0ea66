// The parts of mpi.hpp and parameter_transport.hpp that do not call MPI (built with or without it): whether
// this process is a rank of an mpirun job, and the timeout ranks wait for each other.
#include <cstdlib>
#include <string>

#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/distribute/parameter_transport.hpp"

namespace tp::distribute {

bool parameter_server_job() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* text = std::getenv(variable);
    if (text == nullptr || std::atoi(text) <= 1) continue;
    if (!mpi_built()) {
      TP_THROW(DeviceError, "distribute", "parameter server: launched by mpirun (", variable, "=", text,
               ") but tensorpool was built without MPI; install Open MPI (apt-get install libopenmpi-dev) and "
               "rebuild, or run without mpirun for in-process workers");
    }
    return true;
  }
  return false;
}

std::chrono::milliseconds effective_timeout(const MpiOptions& options) {
  if (const char* text = std::getenv("TP_COLLECTIVE_TIMEOUT"); text != nullptr) {
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    if (end == text || *end != '\0' || !(seconds > 0) || seconds > 1e6) {
      TP_THROW(InvalidArgument, "distribute", "TP_COLLECTIVE_TIMEOUT='", text,
               "' is not a positive number of seconds (e.g. 30)");
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  }
  return options.timeout;
}

}  // namespace tp::distribute

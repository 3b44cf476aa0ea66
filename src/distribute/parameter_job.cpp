// SPDX-License-Identifier: Apache-2.0
// The parts of mpi.hpp and parameter_transport.hpp that do not call MPI (built with or without it): whether
// this process is a rank of an mpirun job (by the launcher's environment), and the timeout ranks wait for
// each other.
#include <climits>
#include <cstdlib>
#include <optional>
#include <string>

#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"
#include "tensorpool/distribute/parameter_transport.hpp"

namespace tp::distribute {

std::optional<int> launcher_world_size() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* text = std::getenv(variable);
    if (text == nullptr) continue;
    char* end = nullptr;
    const long size = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || size < 1 || size > INT_MAX) {
      TP_THROW(InvalidArgument, "distribute", variable, "='", text,
               "' is not a process count; it is set by mpirun, so start the job with mpirun alone");
    }
    return static_cast<int>(size);
  }
  return std::nullopt;
}

bool parameter_server_job() {
  const std::optional<int> size = launcher_world_size();
  if (!size || *size <= 1) return false;
  if (!mpi_built()) {
    TP_THROW(DeviceError, "distribute", "parameter server: launched by mpirun (", *size,
             " processes) but tensorpool was built without MPI; install Open MPI (apt-get install libopenmpi-dev) "
             "and rebuild, or run without mpirun for in-process workers");
  }
  return true;
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

// SPDX-License-Identifier: Apache-2.0
// Built without MPI: the parameter-server messages say what is missing (parameter_server_job() is false unless
// mpirun launched the process, and then it throws the same advice).
#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/parameter_transport.hpp"

namespace tp::distribute {

namespace {

[[noreturn]] void unavailable() {
  TP_THROW(DeviceError, "distribute",
           "parameter server across processes: tensorpool was built without MPI; install Open MPI (apt-get install "
           "libopenmpi-dev openmpi-bin, or scripts/install-deps) and rebuild");
}

}  // namespace

std::optional<ParameterMessage> receive_parameter_request(Deadline) { unavailable(); }
void send_parameters(int, std::int64_t, std::span<const float>, Deadline) { unavailable(); }
void send_parameter_request(const ParameterMessageHeader&, std::span<const float>, Deadline) { unavailable(); }
std::int64_t receive_parameters(std::vector<float>&, Deadline) { unavailable(); }
void abandon_parameter_job() {}

}  // namespace tp::distribute

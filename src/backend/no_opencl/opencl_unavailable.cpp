// SPDX-License-Identifier: Apache-2.0
// The OpenCL backend's entry points in a build without it (TP_BACKEND_OPENCL off, or OpenCL or CLBlast not
// found at configure time): no opencl devices, and a reason that says how to get them.
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/device/backends.hpp"

namespace tp::device {

namespace {
constexpr const char* kReason =
    "this build has no OpenCL backend (TP_BACKEND_OPENCL off, or OpenCL or CLBlast missing at configure time); "
    "install opencl-headers ocl-icd-opencl-dev libclblast-dev pocl-opencl-icd and reconfigure";
}  // namespace

const std::vector<OpenClProperties>& opencl_physical_devices() {
  static const std::vector<OpenClProperties> none;
  return none;
}

std::string opencl_unavailable_reason() { return kReason; }

std::unique_ptr<Device> make_opencl_device(DeviceId id, DeviceId, std::size_t, const memory::MemoryConfig&,
                                           const DeviceOptions&) {
  TP_THROW(DeviceError, "opencl", "cannot create ", id.str(), ": ", kReason);
}

}  // namespace tp::device

// SPDX-License-Identifier: Apache-2.0
#pragma once
// What to tell a user who names a device this process does not have: the devices it has, and the setting that
// would give the one named. One rule for every front end (`tensorpool train --devices`, the Python package's
// tf.config and tf.distribute), so they give the same advice.

#include <string>
#include <string_view>
#include <vector>

#include "tensorpool/device/device_id.hpp"
#include "tensorpool/memory/memory_config.hpp"

namespace tp::device {

// How a front end words its part of the advice.
struct MissingDeviceWording {
  // Introduces the devices of the same kind to use instead: "--devices " gives "or use --devices sim:0,sim:1".
  std::string_view use = "";
  // Follows the TP_SIM_DEVICES fix, e.g. the CLI's "(or unset it: ...)" where an unset count means "as many as
  // named".
  std::string_view sim_note = "";
};

// "this process has <existing>[ (VARIABLE=value)]; <fix>[, or use <use><devices of id's kind>]" for device `id`,
// which is not among `existing` (the process's devices, planned or built). The fix, by the first rule that
// applies:
//   cuda      without a GPU: why there is none (cuda_unavailable_reason: no CUDA backend in this build, or no
//             device); the alternatives, without "or use";
//   sim, opencl or cuda while TP_VISIBLE_DEVICES is set: it hides the device;
//   sim       set TP_SIM_DEVICES=<index + 1>;
//   opencl    with TP_OPENCL_DEVICES set and a driver that reports devices: set it to <index + 1>; else the
//             driver to install when none reports a device, or the TP_OPENCL_DEVICES split that gives the index;
//   cuda      how many GPUs the CUDA runtime reports, and the logical split that gives more;
//   cpu       cpu:0 is the only cpu device.
// Accelerators end with the devices of their kind that exist (cpu:0 when there are none). `get_env` reads the
// variables (injectable for tests).
[[nodiscard]] std::string missing_device_advice(const DeviceId& id, const std::vector<DeviceId>& existing,
                                                const MissingDeviceWording& wording = {},
                                                const memory::GetEnv& get_env = ::getenv);

}  // namespace tp::device

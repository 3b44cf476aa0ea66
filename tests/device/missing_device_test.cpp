// SPDX-License-Identifier: Apache-2.0
// missing_device_advice: each rule of device/missing_device.hpp, with an injected environment so the results do
// not depend on the caller's TP_* variables. The opencl rules that depend on the machine's driver are checked
// for the part every machine shares.
#include "tensorpool/device/missing_device.hpp"

#include "device/fake_env.hpp"
#include "tensorpool/device/backends.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tp::device {
namespace {

using testing::env_of;
using testing::Variables;

const std::vector<DeviceId> kTwoSims{{DeviceKind::cpu, 0}, {DeviceKind::sim, 0}, {DeviceKind::sim, 1}};

TEST(MissingDeviceAdvice, SimNamesTheCountThatGivesIt) {
  EXPECT_EQ(missing_device_advice({DeviceKind::sim, 3}, kTwoSims, {}, env_of({})),
            "this process has cpu:0, sim:0, sim:1; set TP_SIM_DEVICES=4, or use sim:0,sim:1");
}

TEST(MissingDeviceAdvice, TheFrontEndsWordingAndTheVariableSet) {
  const std::vector<DeviceId> one_sim{{DeviceKind::cpu, 0}, {DeviceKind::sim, 0}};
  EXPECT_EQ(missing_device_advice({DeviceKind::sim, 1}, one_sim, {.use = "--devices ", .sim_note = "(or unset it)"},
                                  env_of({{"TP_SIM_DEVICES", "1"}})),
            "this process has cpu:0, sim:0 (TP_SIM_DEVICES=1); set TP_SIM_DEVICES=2 (or unset it), or use --devices "
            "sim:0");
}

TEST(MissingDeviceAdvice, AVisibleListThatHidesTheDeviceIsNamed) {
  const std::string advice =
      missing_device_advice({DeviceKind::sim, 1}, kTwoSims, {}, env_of({{"TP_VISIBLE_DEVICES", "sim:0"}}));
  EXPECT_NE(advice.find("TP_VISIBLE_DEVICES='sim:0' hides it"), std::string::npos) << advice;
  EXPECT_EQ(advice.find("TP_SIM_DEVICES"), std::string::npos) << advice;
}

TEST(MissingDeviceAdvice, CudaAndCpu) {
  const std::string cuda = missing_device_advice({DeviceKind::cuda, 0}, kTwoSims, {}, env_of({}));
  // No GPU here: the reason is the build's ("this build has no CUDA backend") or the driver's ("no CUDA device").
  if (cuda_physical_devices().empty()) {
    EXPECT_NE(cuda.find(cuda_unavailable_reason()), std::string::npos) << cuda;
    EXPECT_NE(cuda.find("no CUDA"), std::string::npos) << cuda;
    EXPECT_EQ(cuda.find("or use"), std::string::npos) << cuda;
  } else {
    EXPECT_NE(cuda.find("the CUDA runtime reports"), std::string::npos) << cuda;
    EXPECT_TRUE(cuda.ends_with(", or use cpu:0")) << cuda;
  }
  EXPECT_EQ(missing_device_advice({DeviceKind::cpu, 1}, kTwoSims, {}, env_of({})),
            "this process has cpu:0, sim:0, sim:1; cpu:0 is the only cpu device");
}

TEST(MissingDeviceAdvice, OpenClWithoutAnyOfItsKindSuggestsCpu) {
  const std::string advice =
      missing_device_advice({DeviceKind::opencl, 0}, kTwoSims, {.use = "--devices "}, env_of({}));
  // The driver decides the fix (install one, or split the devices it reports); the alternative is the same.
  EXPECT_NE(advice.find("OpenCL"), std::string::npos) << advice;
  EXPECT_TRUE(advice.ends_with(", or use --devices cpu:0")) << advice;
}

}  // namespace
}  // namespace tp::device

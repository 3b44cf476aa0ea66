// SPDX-License-Identifier: Apache-2.0
// `tensorpool devices` end to end: runs the built binary (build/bin/tensorpool, found next to this test's build
// folder, or $TP_CLI) under a controlled environment (every TP_* device and memory variable unset unless a
// case sets it) and checks the table, the JSON and the exit codes for good and bad input.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include "tools/support/cli_runner.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;

using tp::cli::testing::cli_path;
using tp::cli::testing::CliRun;

// Runs `tensorpool <arguments>` with the variables tensorpool reads unset, no OpenCL or CUDA devices (so the
// lists do not depend on the machine's drivers and GPUs), then `variables` ("NAME=value ...") set.
CliRun run(const std::string& arguments, const std::string& variables = "") {
  return tp::cli::testing::run_cli(arguments,
                                   "env -u TP_SIM_DEVICES -u TP_SIM_MEMORY -u TP_VISIBLE_DEVICES -u TP_ALLOW_GROWTH "
                                   "-u TP_ALLOCATOR -u TP_MEMORY_FRACTION TP_OPENCL_DEVICES=0 TP_CUDA_DEVICES=0 " +
                                       variables);
}

int lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

class DevicesCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cli_path())) GTEST_SKIP() << "tensorpool binary not built at " << cli_path();
  }
};

TEST_F(DevicesCli, JsonListsTheConfiguredDevicesWithTheProbesMemory) {
  const CliRun result = run("devices --sim-devices 2 --sim-memory 1GiB --allocate 10MiB --json");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json json = nlohmann::json::parse(result.output);
  ASSERT_EQ(json.size(), 1u);
  const nlohmann::json& devices = json.at("devices");
  ASSERT_EQ(devices.size(), 3u) << result.output;
  const char* names[] = {"cpu:0", "sim:0", "sim:1"};
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const nlohmann::json& device = devices[i];
    EXPECT_EQ(device.size(), 12u) << device;
    EXPECT_EQ(device.at("name"), names[i]);
    EXPECT_EQ(device.at("physical"), names[i]);
    EXPECT_EQ(device.at("allocator"), "expandable");
    EXPECT_EQ(device.at("policy"), "grow");
    EXPECT_EQ(device.at("streams"), 1);
    for (const char* key : {"capacity_bytes", "limit_bytes", "in_use_bytes", "reserved_bytes", "peak_in_use_bytes"}) {
      EXPECT_TRUE(device.at(key).is_number_unsigned()) << key << " in " << device;
    }
  }
  EXPECT_EQ(devices[0].at("kind"), "cpu");
  EXPECT_EQ(devices[0].at("staging"), "pageable");  // the cpu's memory is host memory: nothing to pin
  EXPECT_EQ(devices[0].at("in_use_bytes"), 0);      // the probe allocates on accelerators only
  for (std::size_t i = 1; i < devices.size(); ++i) {
    const nlohmann::json& device = devices[i];
    EXPECT_EQ(device.at("kind"), "sim");
    EXPECT_EQ(device.at("staging"), "mlock");  // nothing was staged, so no refusal could switch it
    EXPECT_EQ(device.at("capacity_bytes"), kGiB);
    EXPECT_EQ(device.at("limit_bytes"), kGiB);
    EXPECT_GE(device.at("in_use_bytes").get<std::size_t>(), 10 * kMiB);
    EXPECT_GE(device.at("reserved_bytes").get<std::size_t>(), device.at("in_use_bytes").get<std::size_t>());
    EXPECT_GE(device.at("peak_in_use_bytes").get<std::size_t>(), 10 * kMiB);
  }
}

TEST_F(DevicesCli, WithoutTheProbeNothingIsInUse) {
  const CliRun result = run("devices --sim-devices 1 --sim-memory 64MiB --json");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json json = nlohmann::json::parse(result.output);  // kept: a range-for over parse(...).at() dangles
  for (const nlohmann::json& device : json.at("devices")) {
    EXPECT_EQ(device.at("in_use_bytes"), 0) << device;
    EXPECT_EQ(device.at("peak_in_use_bytes"), 0) << device;
  }
}

TEST_F(DevicesCli, TheEnvironmentConfiguresTheDevicesAndOptionsOverrideIt) {
  CliRun result =
      run("devices --json", "TP_SIM_DEVICES=2 TP_SIM_MEMORY=64MiB TP_VISIBLE_DEVICES=sim:1 TP_ALLOCATOR=expandable");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  nlohmann::json devices = nlohmann::json::parse(result.output).at("devices");
  ASSERT_EQ(devices.size(), 2u) << result.output;
  EXPECT_EQ(devices[1].at("name"), "sim:0");
  EXPECT_EQ(devices[1].at("physical"), "sim:1");
  EXPECT_EQ(devices[1].at("capacity_bytes"), 64 * kMiB);
  EXPECT_EQ(devices[1].at("allocator"), "expandable");

  result = run("devices --sim-devices 1 --sim-memory 32MiB --json", "TP_SIM_DEVICES=3 TP_SIM_MEMORY=64MiB");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  devices = nlohmann::json::parse(result.output).at("devices");
  ASSERT_EQ(devices.size(), 2u) << result.output;
  EXPECT_EQ(devices[1].at("capacity_bytes"), 32 * kMiB);
}

// Issue 18: one precedence rule in every command, flag over environment: `train`, `estimate` and `profile`
// ignored --sim-memory when TP_SIM_DEVICES was set, and TP_SIM_MEMORY when it was not.
TEST_F(DevicesCli, TheSimMemoryFlagOverridesTheEnvironmentInEveryCommand) {
  struct Case {
    std::string flag, variables;
    std::size_t expected;
  };
  const Case cases[] = {
      {"--sim-memory 48MiB", "TP_SIM_DEVICES=2", 48 * kMiB},
      {"", "TP_SIM_MEMORY=32MiB", 32 * kMiB},
      {"--sim-memory 48MiB", "TP_SIM_MEMORY=32MiB", 48 * kMiB},
      {"--sim-memory 48MiB", "TP_SIM_DEVICES=2 TP_SIM_MEMORY=32MiB", 48 * kMiB},
      {"", "", kGiB},
  };
  for (const Case& c : cases) {
    const CliRun estimate = run("estimate --json " + c.flag, c.variables);
    ASSERT_EQ(estimate.exit_code, 0) << c.flag << " " << c.variables << ": " << estimate.output;
    const nlohmann::json devices = nlohmann::json::parse(estimate.output).at("devices");
    ASSERT_EQ(devices.size(), 2u) << estimate.output;
    for (const nlohmann::json& device : devices) {
      EXPECT_EQ(device.at("limit_bytes").get<std::size_t>(), c.expected) << c.flag << " " << c.variables;
    }
    const std::string sim_memory = c.flag.empty() ? "" : " --sim-memory 48MiB";
    const CliRun listed = run("devices --sim-devices 2 --json" + sim_memory, c.variables);
    ASSERT_EQ(listed.exit_code, 0) << listed.output;
    EXPECT_EQ(nlohmann::json::parse(listed.output).at("devices").at(1).at("capacity_bytes").get<std::size_t>(),
              c.expected)
        << c.flag << " " << c.variables;
  }
  const CliRun small = run("estimate --sim-memory 1KiB", "TP_SIM_DEVICES=2");
  EXPECT_EQ(small.exit_code, 2) << small.output;
  EXPECT_NE(small.output.find("--sim-memory 1KiB"), std::string::npos) << small.output;
}

TEST_F(DevicesCli, PrintsATableWithOneRowPerDevice) {
  const CliRun result = run("devices --sim-devices 2 --sim-memory 1GiB --allocate 10MiB");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(lines(result.output), 4) << result.output;
  for (const char* expected :
       {"name", "kind", "physical", "capacity", "limit", "in use", "reserved", "peak", "allocator", "policy", "streams",
        "cpu:0", "sim:0", "sim:1", "1.00 GiB", "expandable", "grow"}) {
    EXPECT_NE(result.output.find(expected), std::string::npos) << expected << " missing in\n" << result.output;
  }
}

TEST_F(DevicesCli, BadInputExitsWithCodeTwoAndOneLineNamingIt) {
  struct Case {
    std::string arguments;
    std::string variables;
    std::string mentions;
  };
  const Case cases[] = {
      {"devices --sim-devices 65", "", "--sim-devices '65'"},
      {"devices --sim-devices two", "", "--sim-devices 'two'"},
      {"devices --sim-memory 12XB", "", "12XB"},
      {"devices --sim-memory 1KiB", "", "--sim-memory 1KiB"},
      {"devices --sim-devices 1 --sim-memory 1GiB --allocate 2GiB", "", "exceeds sim:0"},
      {"devices --allocate 0", "", "--allocate 0"},
      {"devices --allocate lots", "", "--allocate"},
      {"devices --json=maybe", "", "--json"},
      {"devices --bogus", "", "--bogus"},
      {"devices", "TP_SIM_DEVICES=abc", "TP_SIM_DEVICES='abc'"},
      {"devices", "TP_SIM_MEMORY=0", "TP_SIM_MEMORY='0'"},
      {"devices --sim-devices 2", "TP_VISIBLE_DEVICES=sim:0,,sim:1", "TP_VISIBLE_DEVICES='sim:0,,sim:1'"},
      {"devices --sim-devices 2", "TP_VISIBLE_DEVICES=sim:5", "sim:5 does not exist"},
      {"devices", "TP_ALLOCATOR=tlsf", "TP_ALLOCATOR='tlsf'"},
  };
  for (const Case& c : cases) {
    const CliRun result = run(c.arguments, c.variables);
    EXPECT_EQ(result.exit_code, 2) << c.variables << " " << c.arguments << "\n" << result.output;
    EXPECT_NE(result.output.find(c.mentions), std::string::npos) << c.arguments << "\n" << result.output;
    EXPECT_EQ(lines(result.output), 1) << c.arguments << "\n" << result.output;
  }
}

// With OpenCL devices (TP_OPENCL_DEVICES=2 over the first physical one), the JSON says what each driver reports.
TEST_F(DevicesCli, JsonShowsWhatEachOpenClDriverReports) {
  const CliRun result = run("devices --json --allocate 1MiB", "TP_OPENCL_DEVICES=2");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json devices = nlohmann::json::parse(result.output).at("devices");
  if (devices.size() == 1) GTEST_SKIP() << "no OpenCL device on this machine or in this build";
  ASSERT_EQ(devices.size(), 3u) << result.output;
  for (std::size_t index = 1; index < 3; ++index) {
    const nlohmann::json& device = devices[index];
    EXPECT_EQ(device.at("name"), "opencl:" + std::to_string(index - 1));
    EXPECT_EQ(device.at("kind"), "opencl");
    EXPECT_EQ(device.at("staging"), "CL_MEM_ALLOC_HOST_PTR");
    EXPECT_GE(device.at("in_use_bytes").get<std::size_t>(), kMiB);  // the probe reached it
    const nlohmann::json& opencl = device.at("opencl");
    for (const char* key : {"name", "vendor", "platform", "device_version", "driver_version"}) {
      EXPECT_FALSE(opencl.at(key).get<std::string>().empty()) << key;
    }
    EXPECT_GT(opencl.at("global_memory_bytes").get<std::size_t>(), 0u);
    EXPECT_GT(opencl.at("max_allocation_bytes").get<std::size_t>(), 0u);
    EXPECT_GT(opencl.at("compute_units").get<unsigned>(), 0u);
    for (const char* key : {"coarse_grain_buffer", "fine_grain_buffer", "fine_grain_system"}) {
      EXPECT_TRUE(opencl.at("svm").at(key).is_boolean()) << key;
    }
    EXPECT_TRUE(opencl.at("fp64").is_boolean());
  }
}

}  // namespace

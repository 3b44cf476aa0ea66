// SPDX-License-Identifier: Apache-2.0
// Discovery: the ICD loader's platforms and devices, asked once per process; and the shared context of each
// physical device with its program cache.
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "backend/opencl/opencl_context.hpp"
#include "backend/opencl/opencl_launch.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/device/backends.hpp"

namespace tp::backend::opencl {
namespace {

struct PhysicalDevice {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  device::OpenClProperties properties;
};

std::string device_string(cl_device_id device, cl_device_info what) {
  std::size_t size = 0;
  if (clGetDeviceInfo(device, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string text(size, '\0');
  if (clGetDeviceInfo(device, what, size, text.data(), nullptr) != CL_SUCCESS) return "";
  while (!text.empty() && (text.back() == '\0' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string platform_string(cl_platform_id platform, cl_platform_info what) {
  std::size_t size = 0;
  if (clGetPlatformInfo(platform, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string text(size, '\0');
  if (clGetPlatformInfo(platform, what, size, text.data(), nullptr) != CL_SUCCESS) return "";
  while (!text.empty() && (text.back() == '\0' || text.back() == ' ')) text.pop_back();
  return text;
}

template <typename Value>
Value device_value(cl_device_id device, cl_device_info what) {
  Value value{};
  if (clGetDeviceInfo(device, what, sizeof value, &value, nullptr) != CL_SUCCESS) return Value{};
  return value;
}

device::OpenClProperties describe(cl_platform_id platform, cl_device_id device) {
  device::OpenClProperties properties;
  properties.name = device_string(device, CL_DEVICE_NAME);
  properties.vendor = device_string(device, CL_DEVICE_VENDOR);
  properties.driver_version = device_string(device, CL_DRIVER_VERSION);
  properties.device_version = device_string(device, CL_DEVICE_VERSION);
  properties.platform = platform_string(platform, CL_PLATFORM_NAME);
  properties.global_memory_bytes = device_value<cl_ulong>(device, CL_DEVICE_GLOBAL_MEM_SIZE);
  properties.max_allocation_bytes = device_value<cl_ulong>(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  properties.base_address_align_bytes = device_value<cl_uint>(device, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8;
  properties.compute_units = device_value<cl_uint>(device, CL_DEVICE_MAX_COMPUTE_UNITS);
  // Devices before OpenCL 2.0 do not know the query and report nothing: no SVM.
  const auto svm = device_value<cl_device_svm_capabilities>(device, CL_DEVICE_SVM_CAPABILITIES);
  properties.svm_coarse_grain_buffer = (svm & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) != 0;
  properties.svm_fine_grain_buffer = (svm & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) != 0;
  properties.svm_fine_grain_system = (svm & CL_DEVICE_SVM_FINE_GRAIN_SYSTEM) != 0;
  properties.fp64 = device_value<cl_device_fp_config>(device, CL_DEVICE_DOUBLE_FP_CONFIG) != 0;
  return properties;
}

struct Discovery {
  std::vector<PhysicalDevice> devices;
  std::string reason;  // why `devices` is empty
};

Discovery discover() {
  Discovery discovery;
  cl_uint platform_count = 0;
  const cl_int status = clGetPlatformIDs(0, nullptr, &platform_count);
  if (status != CL_SUCCESS || platform_count == 0) {
    discovery.reason =
        "the OpenCL ICD loader reports no platform (clGetPlatformIDs: " + std::string(error_name(status)) +
        "); install a driver, e.g. apt-get install pocl-opencl-icd for the CPU";
    return discovery;
  }
  std::vector<cl_platform_id> platforms(platform_count);
  check(clGetPlatformIDs(platform_count, platforms.data(), nullptr), "clGetPlatformIDs");
  for (cl_platform_id platform : platforms) {
    cl_uint device_count = 0;
    if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &device_count) != CL_SUCCESS) continue;
    std::vector<cl_device_id> devices(device_count);
    if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, device_count, devices.data(), nullptr) != CL_SUCCESS) continue;
    for (cl_device_id device : devices) discovery.devices.push_back({platform, device, describe(platform, device)});
  }
  if (discovery.devices.empty()) {
    discovery.reason = "the OpenCL platforms (" + std::to_string(platform_count) +
                       ") report no device; install a driver with a device, e.g. apt-get install pocl-opencl-icd";
  }
  return discovery;
}

const Discovery& discovery() {
  static const Discovery result = [] {
    try {
      return discover();
    } catch (const Error& error) {
      Discovery failed;
      failed.reason = error.what();
      return failed;
    }
  }();
  return result;
}

std::string join_names(const std::map<std::string_view, std::string_view>& table) {
  std::string names;
  for (const auto& [name, source] : table) names += (names.empty() ? "" : ", ") + std::string(name);
  return names.empty() ? "none" : names;
}

}  // namespace

cl_program build_program(cl_context context, cl_device_id device, std::string_view name, std::string_view prelude,
                         std::string_view source, const std::string& options) {
  // The prelude first (none for the prelude itself): OpenCL concatenates the strings into one program.
  std::array<const char*, 2> texts{prelude.data(), source.data()};
  const std::array<std::size_t, 2> lengths{prelude.size(), source.size()};
  const std::size_t first = prelude.empty() ? 1 : 0;
  cl_int status = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, static_cast<cl_uint>(2 - first), texts.data() + first,
                                                 lengths.data() + first, &status);
  check(status, "clCreateProgramWithSource(" + std::string(name) + ")");
  status = clBuildProgram(program, 1, &device, options.c_str(), nullptr, nullptr);
  if (status == CL_SUCCESS) return program;
  std::string log;
  std::size_t log_size = 0;
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &log_size) == CL_SUCCESS &&
      log_size > 0) {
    log.resize(log_size);
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, log_size, log.data(), nullptr);
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  }
  clReleaseProgram(program);
  TP_THROW(DeviceError, "opencl", "clBuildProgram failed for program '", name, "' on ",
           device_string(device, CL_DEVICE_NAME), " with options '", options, "': ", error_name(status), " (", status,
           "); build log:\n", log.empty() ? std::string("(empty)") : log);
}

std::shared_ptr<OpenClContext> OpenClContext::acquire(int index) {
  static std::mutex mutex;
  static std::map<int, std::weak_ptr<OpenClContext>> contexts;  // guarded by mutex
  const std::vector<PhysicalDevice>& devices = discovery().devices;
  if (index < 0 || static_cast<std::size_t>(index) >= devices.size()) {
    TP_THROW(DeviceError, "opencl", "physical OpenCL device ", index, " does not exist; there are ", devices.size(),
             devices.empty() ? " (" + discovery().reason + ")" : std::string());
  }
  const std::lock_guard lock(mutex);
  if (std::shared_ptr<OpenClContext> existing = contexts[index].lock()) return existing;
  const PhysicalDevice& physical = devices[static_cast<std::size_t>(index)];
  std::shared_ptr<OpenClContext> context(new OpenClContext(index, physical.device, physical.properties));
  contexts[index] = context;
  return context;
}

OpenClContext::OpenClContext(int index, cl_device_id device, device::OpenClProperties properties)
    : index_(index),
      device_(device),
      properties_(std::move(properties)),
      build_options_(std::string("-cl-std=CL1.2") + (properties_.fp64 ? " -DTP_HAS_FP64=1" : "")) {
  cl_int status = CL_SUCCESS;
  context_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &status);
  check(status, "clCreateContext(" + properties_.name + ")");
}

OpenClContext::~OpenClContext() {
  for (const auto& [name, program] : programs_) clReleaseProgram(program);
  clReleaseContext(context_);
}

cl_program OpenClContext::program(std::string_view name) {
  const std::lock_guard lock(programs_mutex_);
  const auto found = programs_.find(name);
  if (found != programs_.end()) return found->second;
  const auto& sources = program_sources();
  const auto source = sources.find(name);
  if (source == sources.end()) {
    TP_THROW(DeviceError, "opencl", "no OpenCL program '", name, "' is embedded (src/backend/opencl/kernels/", name,
             ".cl); the programs are: ", join_names(sources));
  }
  const auto prelude = sources.find("prelude");
  if (prelude == sources.end())
    TP_THROW(DeviceError, "opencl", "the OpenCL prelude (kernels/prelude.cl) is not embedded");
  cl_program built = build_program(context_, device_, name, name == "prelude" ? std::string_view() : prelude->second,
                                   source->second, build_options_);
  programs_.emplace(std::string(name), built);
  return built;
}

}  // namespace tp::backend::opencl

// Under AddressSanitizer, LeakSanitizer reports what the OpenCL driver (PoCL, its LLVM, the ICD loader) keeps
// until the process exits: not ours, and not fixable here. Our own leaks are still reported. Defined in this
// file because every program with opencl devices links it (the DeviceManager calls opencl_physical_devices).
#if defined(__SANITIZE_ADDRESS__)
#define TP_OPENCL_LEAK_SUPPRESSIONS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TP_OPENCL_LEAK_SUPPRESSIONS 1
#endif
#endif
#ifdef TP_OPENCL_LEAK_SUPPRESSIONS
extern "C" const char* __lsan_default_suppressions();
extern "C" const char* __lsan_default_suppressions() { return "leak:libpocl.so\nleak:libLLVM\nleak:libOpenCL.so\n"; }
#endif

namespace tp::device {

const std::vector<OpenClProperties>& opencl_physical_devices() {
  static const std::vector<OpenClProperties> properties = [] {
    std::vector<OpenClProperties> list;
    for (const auto& physical : backend::opencl::discovery().devices) list.push_back(physical.properties);
    return list;
  }();
  return properties;
}

std::string opencl_unavailable_reason() { return backend::opencl::discovery().reason; }

}  // namespace tp::device
